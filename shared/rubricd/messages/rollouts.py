"""What the trainer publishes: rollouts, and the end of a step."""

import hashlib
from typing import Annotated, Literal, Protocol, cast

import msgspec

from .. import chat
from ._base import (
    MAX_GROUP,
    MAX_PARTS,
    MAX_ROLLOUTS_PER_STEP,
    MAX_STEP,
    MAX_VOTES,
    GroupId,
    InstanceKey,
    Message,
    RolloutCount,
    RolloutId,
    RunId,
    Step,
)
from .trajectories import MAX_TURNS, Tools, Turns, malformed

JudgeMode = Literal["single", "group"]
# Which scored rollouts of a group the analyzers read: every one, each group's best and worst, or k per group.
AnalysisSample = Literal["all", "extremes"] | Annotated[int, msgspec.Meta(ge=1, le=MAX_GROUP)]


class TrainingContext(msgspec.Struct, frozen=True, kw_only=True):
    """Where training stands, so judges and analysts can grade for the stage."""

    goal: str = ""
    model_size: str = ""
    total_steps: Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)] | None = None


class Rollout(Message, tag="rollout", frozen=True, kw_only=True):
    """One sampled response to score.

    `rollout_id` is chosen by the trainer and unique within the run; a rollout
    published twice is scored once. `reply_to` names the stream the Score is
    written to and must be one of the namespace's reply streams.
    `reward_policy` overrides the scorer's RUBRICD_REWARD_POLICY for this
    rollout (`weighted_sum`, `alternating`); set it on every rollout of a run to
    choose the run's policy. An unknown name is rejected.
    `evaluation` marks a rollout sampled to evaluate the policy, not to train
    it (TRL's eval steps, verl's validation): it is scored with the run's
    current rubrics like any other, but not counted in its step, not in the
    meta-class statistics, and kept out of the memory loop (not analysed, so
    no summary or rubric update comes of it) unless the scorers'
    RUBRICD_ANALYZE_EVALUATION is on. Its Score says `evaluation` too.

    `group` names the rollout's sample group: the responses sampled for one prompt in one step (GRPO's G, TRL's
    num_generations, verl's uid), unique within the run's step; `group_size` how many it has (group judging
    judges a complete group at once; without it, at the deadline). `judge_mode` (`single`, `group`),
    `judge_votes` and `analysis_sample` override the services' RUBRICD_JUDGE_MODE, RUBRICD_JUDGE_VOTES and
    RUBRICD_ANALYSIS_SAMPLE for this rollout, like `reward_policy`: set them on every rollout of a run to choose
    the run's. What each does: docs/researchers/groups.md.

    A rollout of an agent carries its `trajectory` (turns in OpenAI's chat format, messages.trajectories), the
    `tools` it was offered, and `prompt_turns`, how many leading turns were its input: the assistant turns after
    them are the policy's. Its `prompt` and `response` are then optional, and filled with the turns' text
    (rubricd.chat.text) where empty. A text rollout carries `prompt` and `response`, both required (an empty
    response is a response, judged). As the scorer takes it in from a trainer, a field a rollout does not have is
    refused (`PublishedRollout`).
    """

    run_id: RunId
    rollout_id: RolloutId
    step: Step
    # Absent (UNSET) only until __post_init__: a text rollout must carry both (an empty string is a response,
    # judged); a trajectory's are filled from its turns.
    prompt: str = cast(str, msgspec.UNSET)
    response: str = cast(str, msgspec.UNSET)
    reference: str | None = None
    instance_key: InstanceKey | None = None
    reply_to: str | None = None
    context: TrainingContext = TrainingContext()
    metadata: dict[str, str] = {}
    published_at: float | None = None
    reward_policy: str | None = None
    evaluation: bool = False
    trajectory: Turns = []
    tools: Tools = []
    prompt_turns: Annotated[int, msgspec.Meta(ge=0, le=MAX_TURNS)] = 0
    group: GroupId | None = None
    group_size: Annotated[int, msgspec.Meta(ge=1, le=MAX_GROUP)] | None = None
    judge_mode: JudgeMode | None = None
    judge_votes: Annotated[int, msgspec.Meta(ge=1, le=MAX_VOTES)] | None = None
    analysis_sample: AnalysisSample | None = None

    def __post_init__(self) -> None:
        if self.group_size is not None and self.group is None:
            raise ValueError("group_size goes with a group: the sample group it is the size of")
        if not self.trajectory:
            if self.tools or self.prompt_turns:
                raise ValueError("tools and prompt_turns go with a trajectory")
            for name in ("prompt", "response"):
                if getattr(self, name) is msgspec.UNSET:
                    raise ValueError(
                        f"a text rollout carries `prompt` and `response` (or its turns: `trajectory`); `{name}` is missing"
                    )
            return
        if (why := malformed(self.trajectory, self.prompt_turns)) is not None:
            raise ValueError(why)
        if not (self.prompt and self.response):
            turns = msgspec.to_builtins(self.trajectory)
            prompt, response = turns[: self.prompt_turns], turns[self.prompt_turns :]
            msgspec.structs.force_setattr(self, "prompt", self.prompt or chat.text(prompt, roles=False))
            msgspec.structs.force_setattr(self, "response", self.response or chat.text(response, roles=False))

    @property
    def policy_turns(self) -> list[int]:
        """The indices of the turns the policy wrote: the assistant turns after the prompt's."""
        return [i for i, t in enumerate(self.trajectory) if i >= self.prompt_turns and t.role == "assistant"]


class PublishedRollout(Rollout, tag="rollout", frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A Rollout as the scorer takes it in from a trainer: a field a rollout does not have is refused, naming it (a
    misspelled `reference` or `judge_mode` would otherwise lose its value silently). Read back anywhere else (the
    kept records, the scored stream), a Rollout ignores unknown fields, so that its schema can grow across a
    rolling deploy."""


class StepClosed(Message, tag="step_closed", frozen=True, kw_only=True):
    """The trainer published every rollout of `step`; `rollouts` says how many.

    `rollout_ids`, when given, lets a step summarized at its deadline name the
    rollouts whose analysis never arrived.

    A trainer of several processes (torchrun, accelerate: each rank publishes
    its own share of the step) sends one closure per process: `part` (its rank)
    of `parts` (the world size), each with its own rollouts. The step is closed
    once every part has closed it, its count the sum of the parts' counts and
    its ids their union; its deadline runs from the first part, so a process
    that died does not hold the step (the summary says how many parts were
    missing). A part closed twice counts once. Both fields or neither; `part`
    below `parts`.

    A process that cannot name its part (a framework's reward worker that knows
    neither its rank nor how many there are: verl's Ray actors) sends its own
    `closer` id instead: closures of different closers add up (a closer's
    counted once), and the step waits `RUBRICD_STEP_QUIET_S` after the last of
    them for another before it is complete. A `closer` goes without `part`.
    """

    run_id: RunId
    step: Step
    rollouts: RolloutCount | None = None
    closed_at: float | None = None
    rollout_ids: Annotated[list[RolloutId], msgspec.Meta(max_length=MAX_ROLLOUTS_PER_STEP)] = []
    part: Annotated[int, msgspec.Meta(ge=0, lt=MAX_PARTS)] | None = None
    parts: Annotated[int, msgspec.Meta(ge=1, le=MAX_PARTS)] | None = None
    closer: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] | None = None

    def __post_init__(self) -> None:
        if (self.part is None) != (self.parts is None):
            raise ValueError("part and parts go together: this closure's part (rank) of the step's parts (world size)")
        if self.closer is not None and self.part is not None:
            raise ValueError("a closure names its part (part of parts) or its closer, not both")
        if self.part is not None and self.parts is not None and self.part >= self.parts:
            raise ValueError(f"part {self.part} is not below parts {self.parts}")


class _Keyed(Protocol):
    """What carries an instance key: a Rollout, a Comparison."""

    @property
    def prompt(self) -> str: ...
    @property
    def instance_key(self) -> str | None: ...


def instance_key(message: _Keyed) -> str:
    """The message's instance key: its own, or a hash of its prompt."""
    return message.instance_key or hashlib.sha256(message.prompt.encode()).hexdigest()[:16]
