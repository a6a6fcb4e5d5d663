"""Which scored rollouts of a sample group are analyzed: the rule, and the choice it makes. Pure.

`all` analyzes every rollout (the default); `extremes` each group's best and worst response by reward, once the
group is complete or at its deadline; an int k the first k of each group to arrive. A rollout without a group is
always analyzed. How the analyzers gather a group in Redis: `effects`; the docs: docs/researchers/groups.md.
"""

from collections.abc import Mapping
from typing import Final, Literal

from rubricd.messages import AnalysisSample, Rollout

ALL: Final[Literal["all"]] = "all"
EXTREMES: Final[Literal["extremes"]] = "extremes"


def rule(rollout: Rollout, default: AnalysisSample) -> AnalysisSample:
    """The rule for this rollout: its own (`analysis_sample`), else the analyzers' setting; `all` without a group."""
    if rollout.group is None:
        return ALL
    return rollout.analysis_sample if rollout.analysis_sample is not None else default


def extremes(rewards: Mapping[str, float | None]) -> list[str]:
    """The best and the worst of a group's rollouts (rollout id -> reward), in id order: one if the group has one
    reward, none if it has none (a rollout without a reward, a failed judge or a masked score, is never chosen).
    Ties go by rollout id (the best: the highest id, the worst: the lowest), so the choice does not depend on the
    order the members arrived in."""
    ranked = sorted((reward, rollout_id) for rollout_id, reward in rewards.items() if reward is not None)
    if not ranked:
        return []
    return sorted({ranked[0][1], ranked[-1][1]})
