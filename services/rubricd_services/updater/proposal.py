"""The updater agent's proposal: the answer schema it is asked for, and its validation (pure).

`proposal_type` bounds what a model may propose; `validate` applies the proposed modifications that keep the
rules, in order, and drops each other one with a reason instead of raising. The rules:
docs/researchers/rubrics.md, "How the updater changes a set".
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, cast

import msgspec

from rubricd.messages import HEALTHBENCH_AXES, Action, Rubric, RubricKind, RubricModification, Strategy
from rubricd_services.rubrics import validation
from rubricd_services.rubrics.ids import new_id
from rubricd_services.rubrics.validation import MAX_CRITERION_CHARS, RubricLimits
from rubricd_services.runtime import prompts


@dataclass(frozen=True, kw_only=True)
class Limits(RubricLimits):
    """A proposed rubric's bounds, and the most adaptive rubrics a set may hold."""

    max_adaptive: int = 12


class UpdateProposal(msgspec.Struct, frozen=True, kw_only=True):
    """The updater agent's answer: a strategy, the modifications, and which memories it consulted.

    The schema the agent is asked for is made per call (`proposal_type`): it names the rubrics it may change and
    the memories it may cite, and bounds its lengths."""

    strategy: Strategy
    rationale: Annotated[str, prompts.max_chars(600)]
    modifications: list[RubricModification] = []
    consulted: list[str] = []  # memory ids from the dynamic memory


@lru_cache(maxsize=64)
def proposal_type(
    adaptive_ids: tuple[str, ...], memory_ids: tuple[str, ...], meta_classes: tuple[str, ...] = HEALTHBENCH_AXES
) -> type[UpdateProposal]:
    """The updater's answer type for one call: a modification's `rubric_id` (modify, remove, reweight) is one of
    the set's adaptive rubrics (anchors never change), a rubric's `meta_class` one of the declared classes,
    `consulted` lists only the memories it was shown, and texts and lists are bounded. So an endpoint that
    enforces the schema cannot let a model target an anchor or an invented rubric or class. `validate` still
    checks every rule: other endpoints only see the schema."""
    rubric = msgspec.defstruct(
        "Rubric",
        [
            ("id", Annotated[str, prompts.max_chars(64)]),
            ("criterion", Annotated[str, prompts.max_chars(MAX_CRITERION_CHARS)]),
            ("rationale", Annotated[str, prompts.max_chars(240)], ""),
            ("tags", Annotated[list[Annotated[str, prompts.max_chars(64)]], prompts.max_items(4)], []),
            ("meta_class", prompts.one_of(sorted(meta_classes)), meta_classes[0] if meta_classes else "accuracy"),
        ],
        bases=(Rubric,),
        frozen=True,
        kw_only=True,
    )
    target = prompts.one_of(sorted(adaptive_ids))
    modification = msgspec.defstruct(
        "RubricModification",
        [
            ("rationale", Annotated[str, prompts.max_chars(240)]),
            ("rubric_id", target | None, None),  # type: ignore[operator]
            ("rubric", rubric | None, None),
        ],
        bases=(RubricModification,),
        frozen=True,
        kw_only=True,
    )
    memory = prompts.one_of(sorted(memory_ids))
    return cast(
        type[UpdateProposal],
        msgspec.defstruct(
            "UpdateProposal",
            [
                ("modifications", Annotated[list[modification], prompts.max_items(4)], []),  # type: ignore[valid-type]
                ("consulted", Annotated[list[memory], prompts.max_items(8 if memory_ids else 0)], []),  # type: ignore[valid-type]
            ],
            bases=(UpdateProposal,),
            frozen=True,
            kw_only=True,
        ),
    )


class Rejection(msgspec.Struct, frozen=True, kw_only=True):
    """A proposed modification that was dropped, and why."""

    action: str
    rubric_id: str | None
    reason: str


@dataclass(frozen=True)
class Validated:
    rubrics: list[Rubric]  # the set after the accepted modifications
    accepted: list[RubricModification]  # normalized: rubric_id always set, generated ids filled in
    rejected: list[Rejection]


def validate(current: list[Rubric], modifications: list[RubricModification], limits: Limits) -> Validated:
    """Apply the modifications that keep the rules, in order; drop each other one with a reason."""
    rubrics = list(current)
    accepted: list[RubricModification] = []
    rejected: list[Rejection] = []
    for mod in modifications:
        try:
            rubrics, applied = _apply_one(rubrics, mod, limits)
            accepted.append(applied)
        except _Invalid as e:
            rejected.append(
                Rejection(
                    action=str(mod.action),
                    rubric_id=mod.rubric_id or (mod.rubric.id if mod.rubric else None),
                    reason=str(e),
                )
            )
    return Validated(rubrics, accepted, rejected)


class _Invalid(Exception):
    pass


def _apply_one(
    rubrics: list[Rubric], mod: RubricModification, limits: Limits
) -> tuple[list[Rubric], RubricModification]:
    by_id = {r.id: r for r in rubrics}
    if mod.action is Action.ADD:
        new = _checked_rubric(mod, limits)
        given = new.id or mod.rubric_id or ""
        if given and given in by_id:
            raise _Invalid(f"cannot add {given!r}: a rubric with that id exists")
        if sum(r.kind is RubricKind.ADAPTIVE for r in rubrics) >= limits.max_adaptive:
            raise _Invalid(f"cannot add: the set already holds max_adaptive={limits.max_adaptive} adaptive rubrics")
        new = msgspec.structs.replace(new, id=given or new_id(new.criterion, by_id))
        return [*rubrics, new], msgspec.structs.replace(mod, rubric_id=new.id, rubric=new, points=None)
    rubric_id = mod.rubric_id or (mod.rubric.id if mod.rubric else None)
    target = by_id.get(rubric_id or "")
    if target is None:
        raise _Invalid(f"cannot {mod.action} {rubric_id!r}: no such rubric")
    if target.kind is RubricKind.ANCHOR:
        raise _Invalid(f"cannot {mod.action} {rubric_id!r}: anchors never change")
    if mod.action is Action.REMOVE:
        return [r for r in rubrics if r.id != rubric_id], msgspec.structs.replace(
            mod, rubric_id=rubric_id, rubric=None, points=None
        )
    if mod.action is Action.REWEIGHT:
        if mod.points is None:
            raise _Invalid(f"cannot reweight {rubric_id!r}: no points given")
        _check_points(mod.points, limits)
        new = msgspec.structs.replace(target, points=mod.points, rationale=mod.rationale)
    else:  # modify: what a rubric is about (its scope) stays; a proposal that leaves it out would reset it
        new = msgspec.structs.replace(_checked_rubric(mod, limits), id=target.id, scope=target.scope)
    return [new if r.id == rubric_id else r for r in rubrics], msgspec.structs.replace(
        mod, rubric_id=rubric_id, rubric=new if mod.action is Action.MODIFY else None
    )


def _checked_rubric(mod: RubricModification, limits: Limits) -> Rubric:
    if mod.rubric is None:
        raise _Invalid(f"cannot {mod.action}: no rubric given")
    if mod.rubric.kind is RubricKind.ANCHOR:
        raise _Invalid(f"cannot {mod.action} an anchor: anchors come only from the seed")
    if not mod.rubric.criterion.strip():
        raise _Invalid(f"cannot {mod.action}: empty criterion")
    reason = validation.meta_class_problem(mod.rubric.meta_class, limits.meta_classes)
    if reason is not None:
        raise _Invalid(f"cannot {mod.action}: {reason}")
    _check_points(mod.rubric.points, limits)
    return msgspec.structs.replace(
        mod.rubric, kind=RubricKind.ADAPTIVE, rationale=mod.rubric.rationale or mod.rationale
    )


def _check_points(points: float, limits: Limits) -> None:
    reason = validation.points_problem(points, limits)
    if reason is not None:
        raise _Invalid(reason)
