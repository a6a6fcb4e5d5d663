"""verifiers (0.4, its v1 API): rubricd's reward for a task's traces, as a `@vf.reward` method. Details:
docs/integrators/verifiers.md."""

from collections.abc import Awaitable, Sequence
from typing import Any

from ..client import RubricdClient, SyncRubricdClient
from ..messages import Score
from .reward import AsyncReward, NotScored, RewardOptions, Sample, group_id, sample_metrics, unscored


class VerifiersReward:
    """rubricd's reward for verifiers traces, one run's.

    `await reward.score(trace, step)` sends the trace's messages (prompt and completion, tool calls and results)
    with its tools as a rollout's turns, in the sample group of its task at that step (the `group_size` rollouts
    of one example a trainer samples, prime-rl's `rollouts_per_example`; judged whole under group judging), and
    returns rubricd's reward; it records the rubric version and each rubric's verdict (`rubric/<id>`) as the
    trace's metrics. verifiers does not know the training step: give it, or set `self.step` where the trainer
    and the environment share a process. When rubricd gives the trace no reward (the judge failed, the rollout
    was refused or masked) it raises NotScored: verifiers records the task error on the trace (`trace.ok`
    false; its `reward`, the sum of the rewards it has, then reads 0.0), and a trainer leaves such traces out.
    It scores on verifiers' own event loop (the client connects on first use there).

        reward = VerifiersReward(RubricdClient(url), run_id="vf-1", group_size=8)

        class MathTask(vf.Task[MathData, vf.State, vf.TaskConfig]):
            @vf.reward
            async def rubricd(self, trace: vf.Trace) -> float:
                return await reward.score(trace)
    """

    def __init__(
        self, client: RubricdClient | SyncRubricdClient, run_id: str, *, group_size: int | None = None, **options: Any
    ) -> None:
        """`group_size`: the rollouts of one example a step samples (None: a group is judged at its deadline);
        `options`: the run's (RewardOptions). A SyncRubricdClient still works (deprecated: a second event loop)."""
        self.reward = AsyncReward(client, run_id, RewardOptions(**options), "VerifiersReward")
        self.group_size = group_size
        self.step = 0

    async def score(self, trace: Any, step: int | None = None) -> float:
        """The trace's reward from rubricd at `step` (None: `self.step`); NotScored when it has none."""
        step = self.step if step is None else step
        [score] = await self.reward.score(step, [sample(trace, step, self.group_size)])
        if unscored(score):
            raise NotScored([score])
        record(trace, score)
        assert score.reward is not None
        return score.reward

    def finish(self) -> Awaitable[None]:
        """Close every open step: `await reward.finish()` when training ends."""
        return self.reward.finish()


def sample(trace: Any, step: int, group_size: int | None) -> Sample:
    """A verifiers trace as a sample: its final branch's messages in OpenAI's chat format (those before the
    policy's first answer are the prompt, a few-shot assistant message in it too), the tools offered, and its
    task's group at `step`."""
    from verifiers.v1.dialects.chat import message_to_wire

    sampled = {id(m) for m in trace.assistant_messages}  # the policy's answers, not the prompt's
    prompt_turns = next((i for i, m in enumerate(trace.messages) if id(m) in sampled), len(trace.messages))
    messages = [message_to_wire(m) for m in trace.messages]
    data = trace.task.data
    return Sample(
        prompt=str(data.prompt_text),
        response=str(trace.last_reply),
        reference=_reference(data),
        messages=messages,
        prompt_turns=prompt_turns,
        tools=_tools(trace.tools),
        group=group_id(f"{trace.task.key}-s{step}") if group_size != 1 else None,
        group_size=group_size if group_size != 1 else None,
    )


def record(trace: Any, score: Score) -> None:
    """The score's rubric version, verdicts and meta-class scores as the trace's metrics (`sample_metrics`)."""
    trace.record_metrics(sample_metrics(score))


def _reference(data: Any) -> str | None:
    answer = getattr(data, "answer", None)
    return None if answer is None else str(answer)


def _tools(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """verifiers' tools as OpenAI function specs."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
        if t.type == "function"
    ]
