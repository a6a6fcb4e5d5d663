"""The generator's draft: the answer schema it is asked for, and the set built from what keeps the rules (pure).

`draft_type` bounds what a model may write; `build` keeps the valid rubrics after the anchors and drops each other
one with a reason. The rules: docs/researchers/rubric-arm.md, "Generated rubrics".
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Literal, cast

import msgspec

from rubricd.messages import Rubric, RubricKind
from rubricd_services.runtime import prompts

from . import validation
from .ids import new_id, normal
from .validation import MAX_CRITERION_CHARS, RubricLimits

RULES = ("hard_rule", "principle")


# What the agent returns: the shared types; each call asks for a bounded schema (`draft_type`).


class DraftRubric(msgspec.Struct, frozen=True, kw_only=True):
    criterion: str
    points: float
    meta_class: str
    rule: str


class RubricDraft(msgspec.Struct, frozen=True, kw_only=True):
    """The generator's answer: the prompt's rubrics."""

    rubrics: list[DraftRubric] = []


@lru_cache(maxsize=16)
def draft_type(
    meta_classes: tuple[str, ...], max_rubrics: int, max_points: float = RubricLimits.max_points
) -> type[RubricDraft]:
    """The answer type of one call: at most `max_rubrics` rubrics, each criterion bounded, its meta-class one of
    the declared ones, its rule one of RULES, its points within ±`max_points`, so a small model under a grammar
    can neither ramble nor invent a class."""
    points = msgspec.Meta(extra_json_schema={"minimum": -max_points, "maximum": max_points})
    rubric = msgspec.defstruct(
        "DraftRubric",
        [
            ("criterion", Annotated[str, prompts.max_chars(MAX_CRITERION_CHARS)]),
            ("points", Annotated[float, points]),
            ("meta_class", prompts.one_of(meta_classes)),
            ("rule", prompts.one_of(RULES)),
        ],
        bases=(DraftRubric,),
        frozen=True,
        kw_only=True,
    )
    return cast(
        type[RubricDraft],
        msgspec.defstruct(
            "RubricDraft",
            [("rubrics", Annotated[list[rubric], _items(max_rubrics)])],  # type: ignore[valid-type]
            bases=(RubricDraft,),
            frozen=True,
            kw_only=True,
        ),
    )


def _items(n: int) -> msgspec.Meta:
    """1 to `n` items, in the schema only (an empty draft is InvalidDraft, not an undecodable answer)."""
    return msgspec.Meta(extra_json_schema={"minItems": 1, "maxItems": n})


# The draft, checked.


class InvalidDraft(Exception):
    """The draft held no rubric that keeps the rules."""


@dataclass(frozen=True)
class Drafted:
    rubrics: list[Rubric]  # the anchors, then the generated rubrics kept
    dropped: list[str] = field(default_factory=list)  # each rubric left out, and why


def build(
    draft: RubricDraft,
    anchors: Sequence[Rubric],
    meta_classes: Sequence[str],
    max_rubrics: int,
    max_points: float = RubricLimits.max_points,
) -> Drafted:
    """The anchors and the draft's valid rubrics (adaptive, ids unique); each other one is dropped with a reason.

    Raise InvalidDraft when none is valid."""
    limits = RubricLimits(-max_points, max_points, tuple(meta_classes))
    taken = {r.id for r in anchors}
    seen = {normal(r.criterion) for r in anchors}
    kept: list[Rubric] = []
    dropped: list[str] = []
    for n, d in enumerate(draft.rubrics, 1):
        criterion = validation.phrased(d.criterion)
        reason = _problem(d, criterion, limits)
        if reason is None and normal(criterion) in seen:
            reason = "repeats an earlier criterion"
        if reason is None and len(kept) >= max_rubrics:
            reason = f"over generate_max_rubrics={max_rubrics}"
        if reason is not None:
            dropped.append(f"rubric {n} ({d.criterion[:60]!r}): {reason}")
            continue
        seen.add(normal(criterion))
        rubric_id = new_id(criterion, taken)
        taken.add(rubric_id)
        rule = cast(Literal["hard_rule", "principle"], d.rule)
        kept.append(
            Rubric(
                id=rubric_id,
                criterion=criterion,
                points=d.points,
                meta_class=d.meta_class,
                kind=RubricKind.ADAPTIVE,
                rule=rule,
            )
        )
    if not kept:
        raise InvalidDraft("the draft held no valid rubric" + (f": {'; '.join(dropped)}" if dropped else ""))
    return Drafted([*anchors, *kept], dropped)


def _problem(d: DraftRubric, criterion: str, limits: RubricLimits) -> str | None:
    return (
        validation.phrasing_problem(criterion)
        or validation.points_problem(d.points, limits)
        or validation.meta_class_problem(d.meta_class, limits.meta_classes)
        or (f"rule {d.rule!r} is not one of {list(RULES)}" if d.rule not in RULES else None)
    )
