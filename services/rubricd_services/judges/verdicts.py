"""The judge's verdicts on a rubric list, and how it is asked (its style).

The verdict's schema is made per rubric list (`verdict_type`): an object with
one required verdict per rubric id and no other key. So an endpoint that
enforces the schema (a grammar) cannot let a model skip or invent a rubric, and
an answer that does is invalid, and retried, wherever it is checked.

Two variants of the judge (`Style`): every rubric in one call (the default) or
one call per rubric, as HealthBench's grader asks; each verdict with its
explanation first (the default) or the verdict alone. Their measured agreement
and cost: docs/researchers/judges.md, "Judge variants".
"""

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Literal

import msgspec

JUDGE = "judge"  # the agent: its settings are `agents.judge`, its prompt prompts/judge.md
MAX_EXPLANATION_CHARS = 400


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """The judge's decision on one rubric: its reasons first, then whether the rubric is met.

    The explanation's bound is in the schema only (not checked on decode): a server that enforces it by
    grammar stops a small model that would run on; OpenAI's strict mode, which refuses it, never sees it.
    """

    explanation: Annotated[str, msgspec.Meta(extra_json_schema={"maxLength": MAX_EXPLANATION_CHARS})]
    met: bool


class BareVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """The judge's decision on one rubric, with no reasons (Style.explain off); an explanation given anyway by an
    endpoint that does not enforce the schema is ignored."""

    met: bool


MAX_TURNS_NAMED = 256  # in the schema only, as the explanation's bound
Turns = Annotated[list[int], msgspec.Meta(extra_json_schema={"maxItems": MAX_TURNS_NAMED})]


class TurnVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """The judge's decision on a turn rubric (Rubric.scope) for a trajectory: its reasons, then the policy turns
    that meet the criterion and those that do not (the others it does not apply to)."""

    explanation: Annotated[str, msgspec.Meta(extra_json_schema={"maxLength": MAX_EXPLANATION_CHARS})]
    met_turns: Turns
    unmet_turns: Turns


class BareTurnVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """A turn rubric's decision with no reasons (Style.explain off)."""

    met_turns: Turns
    unmet_turns: Turns


@dataclass(frozen=True)
class Decided:
    """A rubric's verdict as read: met or not, why, and for a turn rubric the policy turns that meet it and fail
    it. A turn rubric is met when some turn meets it and, for positive points, none fails it: a rule met nowhere
    earns nothing, and a bad behaviour shown once counts."""

    met: bool
    explanation: str = ""
    met_turns: tuple[int, ...] = ()
    unmet_turns: tuple[int, ...] = ()


Calls = Literal["one", "per_rubric"]


@dataclass(frozen=True)
class Style:
    """How the judge is asked: every rubric in one call or one call per rubric; reasons before each verdict or
    none."""

    calls: Calls = "one"
    explain: bool = True


ALL_AT_ONCE = Style()  # the default: every rubric in one call, each verdict with its explanation


def verdict_type(
    rubric_ids: tuple[str, ...], explain: bool = True, turn_ids: frozenset[str] = frozenset()
) -> type[msgspec.Struct]:
    """What the judge returns for these rubrics: `{"<rubric id>": Verdict, ...}` (BareVerdict without `explain`),
    every id required, no other; a TurnVerdict (BareTurnVerdict) for the ids in `turn_ids` (the turn rubrics of
    a set judged on a trajectory).

    Named `JudgeVerdict` (the schema's name); its fields are `r0, r1, ...` renamed to the ids, which need not
    be Python names. One type per rubric list, cached: the LLM client caches its schema by type.
    """
    return _verdict_type(rubric_ids, explain, turn_ids)  # one cache key however the arguments are given


@lru_cache(maxsize=1024)
def _verdict_type(rubric_ids: tuple[str, ...], explain: bool, turn_ids: frozenset[str]) -> type[msgspec.Struct]:
    whole, turns = (Verdict, TurnVerdict) if explain else (BareVerdict, BareTurnVerdict)
    fields = [(f"r{i}", turns if rubric_id in turn_ids else whole) for i, rubric_id in enumerate(rubric_ids)]
    rename = {f"r{i}": rubric_id for i, rubric_id in enumerate(rubric_ids)}
    return msgspec.defstruct(
        "JudgeVerdict", fields, rename=rename, forbid_unknown_fields=True, frozen=True, kw_only=True
    )


def read(
    verdict: msgspec.Struct,
    rubric_ids: tuple[str, ...],
    points: Mapping[str, float] | None = None,
    policy_turns: Collection[int] = (),
) -> dict[str, Decided]:
    """The verdicts of a `verdict_type(rubric_ids, ...)` answer, keyed by rubric id (a bare one's explanation
    empty). A turn verdict names only `policy_turns` (others dropped; a turn named both ways fails) and is met
    by Decided's rule, which needs the rubric's `points`."""
    found = {rubric_id: getattr(verdict, f"r{i}") for i, rubric_id in enumerate(rubric_ids)}
    return {k: _decided(v, (points or {}).get(k, 0.0), policy_turns) for k, v in found.items()}


def _decided(v: msgspec.Struct, points: float, policy_turns: Collection[int]) -> Decided:
    explanation = str(getattr(v, "explanation", ""))
    if isinstance(v, Verdict | BareVerdict):
        return Decided(v.met, explanation)
    assert isinstance(v, TurnVerdict | BareTurnVerdict)
    unmet = tuple(sorted({t for t in v.unmet_turns if t in policy_turns}))
    met = tuple(sorted({t for t in v.met_turns if t in policy_turns} - set(unmet)))
    return Decided(bool(met) and (points < 0 or not unmet), explanation, met, unmet)
