"""What one rollout is judged and rewarded by, resolved once from its own choices and the scorer's settings.

A run chooses per rollout (`Rollout.judge_mode`, `judge_votes`, `reward_policy`); a choice it leaves out is the
scorer's setting of the same name. The handler resolves a rollout's config here and passes it on, so no other
module reads a choice beside its setting.
"""

from dataclasses import dataclass

from rubricd.messages import JudgeMode, Rollout

from .settings import ScorerSettings


@dataclass(frozen=True)
class RunConfig:
    """A rollout's judging and reward, as chosen by its run or, where it does not choose, by the settings."""

    judge_mode: JudgeMode
    votes: int
    reward_policy: str

    @classmethod
    def of(cls, rollout: Rollout, settings: ScorerSettings) -> "RunConfig":
        return cls(
            judge_mode=rollout.judge_mode or settings.judge_mode,
            votes=rollout.judge_votes or settings.judge_votes,
            reward_policy=rollout.reward_policy or settings.reward_policy,
        )

    def gathers(self, rollout: Rollout) -> bool:
        """Whether the rollout joins its sample group to be judged with it (a group of one is judged alone)."""
        return self.judge_mode == "group" and rollout.group is not None and rollout.group_size != 1
