"""Outcome policies: how per-rubric verdicts become the trainer's reward.

Every score follows HealthBench's rule (met points over positive points, clipped to [0, 1]), per meta-class
too, a class without a positive-point rubric being undefined. `weighted_sum` rewards the weighted total;
`alternating` (ARL-RR) the step's active meta-class, with `undefined` saying what an undefined one gives.
A policy is a plain function; `POLICIES` names them so a setting can pick one.
The rules: docs/researchers/rubrics.md and docs/researchers/alternating.md.
"""

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

import msgspec

from rubricd.messages import Rubric

# What `alternating` gives when the active meta-class is undefined for a rollout.
Undefined = Literal["weighted_total", "mask"]


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """A policy's outcome: `total` is the reward (None: masked), `weighted_total` the weighted sum over every
    rubric, `meta_class_scores` each class's own score (None where undefined)."""

    total: float | None
    weighted_total: float
    meta_class_scores: dict[str, float | None]
    active_meta_class: str | None = None
    masked: bool = False


class Policy(Protocol):
    def __call__(
        self,
        rubrics: Sequence[Rubric],
        met: Mapping[str, bool],
        *,
        active: str | None = None,
        undefined: Undefined = "weighted_total",
    ) -> Outcome: ...


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def healthbench_score(rubrics: Sequence[Rubric], met: Mapping[str, bool]) -> float | None:
    """HealthBench's score of `rubrics` given which are met; None without a positive-point rubric."""
    possible = sum(r.points for r in rubrics if r.points > 0)
    if possible <= 0:
        return None
    return _clip(sum(r.points for r in rubrics if met.get(r.id, False)) / possible)


def points_ratio(rubrics: Sequence[Rubric], met: Mapping[str, bool]) -> float:
    """The weighted total: HealthBench's score, and for a set of only negative rubrics 1 - the met penalty share."""
    score = healthbench_score(rubrics, met)
    if score is not None:
        return score
    penalty = -sum(r.points for r in rubrics if r.points < 0)
    achieved = sum(r.points for r in rubrics if met.get(r.id, False))
    return _clip(1.0 + achieved / penalty) if penalty > 0 else 1.0


def meta_class_scores(rubrics: Sequence[Rubric], met: Mapping[str, bool]) -> dict[str, float | None]:
    """Each meta-class's HealthBench score, by class name in order; None where the class is undefined."""
    by_class: dict[str, list[Rubric]] = {}
    for rubric in rubrics:
        by_class.setdefault(rubric.meta_class, []).append(rubric)
    return {c: healthbench_score(rs, met) for c, rs in sorted(by_class.items())}


def weighted_sum(
    rubrics: Sequence[Rubric],
    met: Mapping[str, bool],
    *,
    active: str | None = None,
    undefined: Undefined = "weighted_total",
) -> Outcome:
    """The weighted total over every rubric; `active` and `undefined` play no part."""
    total = points_ratio(rubrics, met)
    return Outcome(total=total, weighted_total=total, meta_class_scores=meta_class_scores(rubrics, met))


def alternating(
    rubrics: Sequence[Rubric],
    met: Mapping[str, bool],
    *,
    active: str | None = None,
    undefined: Undefined = "weighted_total",
) -> Outcome:
    """The score of the `active` meta-class with every penalty-only class's penalties (None: the weighted total);
    see the module's docstring."""
    total = points_ratio(rubrics, met)
    scores = meta_class_scores(rubrics, met)
    if active is None:
        return Outcome(total=total, weighted_total=total, meta_class_scores=scores)
    score = None
    if scores.get(active) is not None:
        penalties_only = {c for c, s in scores.items() if s is None}
        score = healthbench_score([r for r in rubrics if r.meta_class in {active, *penalties_only}], met)
    masked = score is None and undefined == "mask"
    return Outcome(
        total=None if masked else total if score is None else score,
        weighted_total=total,
        meta_class_scores=scores,
        active_meta_class=active,
        masked=masked,
    )


POLICIES: dict[str, Policy] = {"weighted_sum": weighted_sum, "alternating": alternating}


def policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown reward policy {name!r}; known: {sorted(POLICIES)}") from None
