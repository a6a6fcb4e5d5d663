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


Calls = Literal["one", "per_rubric"]


@dataclass(frozen=True)
class Style:
    """How the judge is asked: every rubric in one call or one call per rubric; reasons before each verdict or
    none."""

    calls: Calls = "one"
    explain: bool = True


ALL_AT_ONCE = Style()  # the default: every rubric in one call, each verdict with its explanation


def verdict_type(rubric_ids: tuple[str, ...], explain: bool = True) -> type[msgspec.Struct]:
    """What the judge returns for these rubrics: `{"<rubric id>": Verdict, ...}` (BareVerdict without `explain`),
    every id required, no other.

    Named `JudgeVerdict` (the schema's name); its fields are `r0, r1, ...` renamed to the ids, which need not
    be Python names. One type per rubric list, cached: the LLM client caches its schema by type.
    """
    return _verdict_type(rubric_ids, explain)  # one cache key however `explain` is given


@lru_cache(maxsize=1024)
def _verdict_type(rubric_ids: tuple[str, ...], explain: bool) -> type[msgspec.Struct]:
    one = Verdict if explain else BareVerdict
    fields = [(f"r{i}", one) for i in range(len(rubric_ids))]
    rename = {f"r{i}": rubric_id for i, rubric_id in enumerate(rubric_ids)}
    return msgspec.defstruct(
        "JudgeVerdict", fields, rename=rename, forbid_unknown_fields=True, frozen=True, kw_only=True
    )


def read(verdict: msgspec.Struct, rubric_ids: tuple[str, ...]) -> dict[str, Verdict]:
    """The verdicts of a `verdict_type(rubric_ids)` answer, keyed by rubric id (a bare one's explanation empty)."""
    found = {rubric_id: getattr(verdict, f"r{i}") for i, rubric_id in enumerate(rubric_ids)}
    return {k: v if isinstance(v, Verdict) else Verdict(explanation="", met=v.met) for k, v in found.items()}
