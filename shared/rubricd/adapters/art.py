"""OpenPipe ART: rubricd in place of RULER. `score_group` takes a `TrajectoryGroup` and returns the same group with
rubricd's rewards, as ART's `ruler_score_group` does, for `gather_trajectory_groups(..., after_each=...)`.
Details: docs/integrators/art.md."""

import logging
import uuid
from collections.abc import Awaitable
from typing import Any

from ..chat import text
from ..client import RubricdClient, SyncRubricdClient
from ..messages import JudgeMode, Score
from .reward import AsyncReward, NotScored, RewardOptions, Sample, sample_metrics, unscored

log = logging.getLogger("rubricd.adapters")


class ArtReward:
    """rubricd's rewards for ART's trajectory groups, one run's.

    `score_group(group, step)` judges the group's trajectories as one sample group (group judging by default:
    `judge_mode`), each trajectory's messages as a rollout's turns with its tools, and returns a new group
    whose trajectories carry rubricd's reward; in their metrics, the reward they had (`independent_reward`,
    as RULER keeps it), `rubricd_reward`, and `sample_metrics`: `rubric_version`, each rubric's verdict
    (`rubric/<id>`: 1.0 met, 0.0 not) and each meta-class's score (`meta/<class>`). A group with a trajectory
    rubricd gave no reward (its judge failed, it was refused, or the `alternating` policy masked it) raises
    NotScored, or, with `swallow_exceptions`, is None, with a warning:
    `gather_trajectory_groups` then drops the whole group, as it does a group RULER failed. Never a reward of 0
    that looks earned. Like RULER, it refuses trajectories with additional histories. It scores on ART's own
    event loop (the client connects on first use there).

        reward = ArtReward(RubricdClient(url), run_id="art-1")
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(model, s) for _ in range(4)) for s in scenarios),
            after_each=lambda g: reward.score_group(g, step, swallow_exceptions=True),
        )
        await reward.finish()
    """

    def __init__(
        self,
        client: RubricdClient | SyncRubricdClient,
        run_id: str,
        *,
        judge_mode: JudgeMode | None = "group",
        **options: Any,
    ) -> None:
        """`options`: the run's (RewardOptions: its policy, votes, analysis sample, synchronous mode, timeout). A
        SyncRubricdClient still works (deprecated: a second event loop)."""
        self.reward = AsyncReward(client, run_id, RewardOptions(judge_mode=judge_mode, **options), "ArtReward")

    async def score_group(self, group: Any, step: int, *, swallow_exceptions: bool = False) -> Any:
        """The group with rubricd's rewards (a new TrajectoryGroup; the given one is left as it was)."""
        trajectories = list(group.trajectories)
        if any(t.additional_histories for t in trajectories):
            raise ValueError("trajectories with additional histories are not judged (as with RULER)")
        group_id = f"art-{uuid.uuid4().hex[:16]}"  # one sample group per call
        try:
            scores = await self.reward.score(step, [sample(t, group_id, len(trajectories)) for t in trajectories])
            if any(unscored(s) for s in scores):
                raise NotScored(scores)
        except Exception as e:
            if swallow_exceptions:
                log.warning("ART group of %d trajectories dropped: %s", len(trajectories), e)
                return None
            raise
        copies = [scored(t, s) for t, s in zip(trajectories, scores, strict=True)]
        return type(group)(copies, metadata=dict(group.metadata), metrics=dict(group.metrics), logs=list(group.logs))

    def finish(self) -> Awaitable[None]:
        """Close every open step: `await reward.finish()` when training ends."""
        return self.reward.finish()


def sample(trajectory: Any, group: str, group_size: int) -> Sample:
    """An ART trajectory as a sample of `group` (of `group_size`): its messages (ART's `messages()`: its choices as
    assistant messages) and its tools; the messages before its first choice, the policy's first answer, are the
    prompt (a few-shot assistant message in the prompt stays the prompt's)."""
    messages = list(trajectory.messages())
    recorded = trajectory.messages_and_choices
    prompt_turns = next((i for i, m in enumerate(recorded) if not isinstance(m, dict)), None)
    if prompt_turns is None:  # no choices recorded: the messages before the first assistant message
        prompt_turns = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return Sample(
        prompt=text(messages[:prompt_turns], roles=False),
        response=text(messages[prompt_turns:], roles=False),
        messages=messages,
        prompt_turns=prompt_turns,
        tools=list(trajectory.tools or ()),
        group=group,
        group_size=group_size,
    )


def scored(trajectory: Any, score: Score) -> Any:
    """A copy of `trajectory` with rubricd's reward and verdicts."""
    fresh = {"metrics": dict(trajectory.metrics), "metadata": dict(trajectory.metadata), "logs": list(trajectory.logs)}
    copy = trajectory.model_copy(update=fresh)
    copy.metrics["independent_reward"] = trajectory.reward
    copy.metrics["rubricd_reward"] = score.reward
    copy.metrics.update(sample_metrics(score))
    copy.reward = score.reward
    copy.log(
        "rubricd: " + "; ".join(f"{r.rubric_id} {'met' if r.met else 'unmet'}: {r.explanation}" for r in score.results)
    )
    return copy
