"""OpenPipe ART: rubricd in place of RULER. `score_group` takes a `TrajectoryGroup` and returns the same group with
rubricd's rewards, as ART's `ruler_score_group` does, for `gather_trajectory_groups(..., after_each=...)`.
Details: docs/integrators/art.md."""

import uuid
from collections.abc import Mapping
from typing import Any

from ..chat import text
from ..client import SyncRubricdClient
from ..messages import Score
from .reward import JudgeFailed, Reward, Sample, unscored


class ArtReward:
    """rubricd's rewards for ART's trajectory groups, one run's.

    `score_group(group, step)` judges the group's trajectories as one sample group (group judging by default:
    `judge_mode`), each trajectory's messages as a rollout's turns with its tools, and returns a new group
    whose trajectories carry rubricd's reward; in their metrics, the reward they had (`independent_reward`,
    as RULER keeps it), `rubricd_reward`, `rubric_version` and each rubric's verdict (`rubric/<id>`: 1.0 met,
    0.0 not). A group with a trajectory rubricd gave no reward raises JudgeFailed, or, with
    `swallow_exceptions`, is None: `gather_trajectory_groups` then drops it, as it does a group RULER failed.
    Never a reward of 0 that looks earned.

        reward = ArtReward(SyncRubricdClient(url), run_id="art-1")
        groups = await art.gather_trajectory_groups(
            (art.TrajectoryGroup(rollout(model, s) for _ in range(4)) for s in scenarios),
            after_each=lambda g: reward.score_group(g, step, swallow_exceptions=True),
        )
    """

    def __init__(self, client: SyncRubricdClient, run_id: str, *, judge_mode: Any = "group", **options: Any) -> None:
        """`options`: as every adapter's (rubricd.adapters.reward.Reward: the run's policy, votes, analysis
        sample, synchronous mode, timeout)."""
        self.reward = Reward(client, run_id, judge_mode=judge_mode, **options)

    async def score_group(self, group: Any, step: int, *, swallow_exceptions: bool = False) -> Any:
        """The group with rubricd's rewards (a new TrajectoryGroup; the given one is left as it was)."""
        trajectories = list(group.trajectories)
        members = f"art-{uuid.uuid4().hex[:16]}"  # the sample group's id: one per call
        try:
            scores = await self.reward.score_async(step, [sample(t, members, len(trajectories)) for t in trajectories])
            if any(unscored(s) for s in scores):
                raise JudgeFailed(scores)
        except Exception:
            if swallow_exceptions:
                return None
            raise
        copies = [scored(t, s) for t, s in zip(trajectories, scores, strict=True)]
        return type(group)(copies, metadata=dict(group.metadata), metrics=dict(group.metrics), logs=list(group.logs))

    def finish(self) -> None:
        """Close every open step (call it when training ends)."""
        self.reward.finish()


def sample(trajectory: Any, group: str, group_size: int) -> Sample:
    """An ART trajectory as a sample of `group` (of `group_size`): its messages (ART's `messages()`: its choices as
    assistant messages; those before the first assistant message are the prompt) and its tools."""
    messages = list(trajectory.messages())
    prompt_turns = next((i for i, m in enumerate(messages) if _role(m) == "assistant"), len(messages))
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
    copy = trajectory.model_copy(update={"metrics": dict(trajectory.metrics)})
    copy.metrics["independent_reward"] = trajectory.reward
    copy.metrics["rubricd_reward"] = score.reward
    copy.metrics["rubric_version"] = score.rubric_version
    for result in score.results:
        copy.metrics[f"rubric/{result.rubric_id}"] = 1.0 if result.met else 0.0
    copy.reward = score.reward
    copy.log(
        "rubricd: " + "; ".join(f"{r.rubric_id} {'met' if r.met else 'unmet'}: {r.explanation}" for r in score.results)
    )
    return copy


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, Mapping) else getattr(message, "role", None)
