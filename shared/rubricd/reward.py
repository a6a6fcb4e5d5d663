"""Reward policies: how per-rubric verdicts become the trainer's reward.

The default, `weighted_sum`, is HealthBench's rule: the points of met rubrics
divided by the sum of positive points, clipped to [0, 1]. Negative rubrics
(undesirable behaviour) subtract when met. Each meta-class gets the same rule
over its own rubrics; a meta-class with only negative rubrics scores
1 - (met penalty / total penalty), so 1 means "none of the bad behaviour".

A policy is a plain function; `POLICIES` names them so a setting can pick one.
"""

from collections.abc import Callable, Mapping, Sequence

import msgspec

from .messages import Rubric


class Reward(msgspec.Struct, frozen=True):
    total: float
    meta_class_scores: dict[str, float]


Policy = Callable[[Sequence[Rubric], Mapping[str, bool]], Reward]


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))


def points_ratio(rubrics: Sequence[Rubric], met: Mapping[str, bool]) -> float:
    """HealthBench's score of `rubrics` given which are met."""
    possible = sum(r.points for r in rubrics if r.points > 0)
    achieved = sum(r.points for r in rubrics if met.get(r.id, False))
    if possible > 0:
        return _clip(achieved / possible)
    penalty = -sum(r.points for r in rubrics if r.points < 0)
    return _clip(1.0 + achieved / penalty) if penalty > 0 else 1.0


def weighted_sum(rubrics: Sequence[Rubric], met: Mapping[str, bool]) -> Reward:
    by_class: dict[str, list[Rubric]] = {}
    for rubric in rubrics:
        by_class.setdefault(rubric.meta_class, []).append(rubric)
    return Reward(
        total=points_ratio(rubrics, met),
        meta_class_scores={c: points_ratio(rs, met) for c, rs in sorted(by_class.items())},
    )


POLICIES: dict[str, Policy] = {"weighted_sum": weighted_sum}


def policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown reward policy {name!r}; known: {sorted(POLICIES)}") from None
