"""Rubric-ARM training: the rollouts of its two models, and their rewards.

A trainer training Rubric-ARM's rubric generator or its judge publishes each completion as an ArmRollout on the
arm stream; the arm service rewards it against the run's imported preference pairs and answers an ArmReward on
the trainer's reply stream. A run's `Plan` says which model each step trains (a trainer loops over its turns);
the arm service writes each step's `PhaseDecision` once. The rules: docs/researchers/rubric-arm.md, "Training the
generator and the judge".
"""

from typing import Annotated, Literal

import msgspec

from ._base import InstanceKey, Message, RolloutId, RunId, Step
from .comparisons import ComparisonId, Order, Winner
from .rubrics import Rubric
from .scores import JudgeStatus

# Which model a rollout trains: the rubric generator (its completion is a rubric set for a prompt) or the judge
# (its completion is a verdict on one comparison).
Phase = Literal["generator", "judge"]
# A model as the trainer names it (the `model` of its OpenAI-compatible endpoint): it names a frozen model's
# version on the rewards of the other phase.
ModelName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:/@+-]{1,200}(?!\n)$")]


class ArmRollout(Message, tag="arm_rollout", frozen=True, kw_only=True):
    """One completion of the model being trained, to reward.

    `phase` says which model wrote `completion`: `generator` (a rubric set it generated for the preference prompt
    `prompt_id`, in the generator's answer format) or `judge` (a verdict on the comparison `comparison_id`, shown
    in `order`, in the pairwise judge's answer format). `judge_model` and `generator_model` name both models'
    versions, kept with the reward: the frozen one of the other phase (generator phase: `judge_model` is the judge
    rubricd asks, default the arm service's pairwise agent's model; judge phase: `generator_model`, required, is
    the generator whose rubrics the judge was shown) and, optionally, the one being trained. `rollout_id` is
    unique within the run; a rollout published twice is rewarded once. `reply_to` must be one of the namespace's
    reply streams.
    """

    run_id: RunId
    rollout_id: RolloutId
    step: Step
    phase: Phase
    completion: str
    prompt_id: InstanceKey | None = None
    comparison_id: ComparisonId | None = None
    order: Order = "AB"
    judge_model: ModelName | None = None
    generator_model: ModelName | None = None
    reply_to: str | None = None
    metadata: dict[str, str] = {}
    published_at: float | None = None

    def __post_init__(self) -> None:
        if self.phase == "generator" and self.prompt_id is None:
            raise ValueError("a generator rollout names its preference prompt: prompt_id")
        if self.phase == "judge" and (self.comparison_id is None or self.generator_model is None):
            raise ValueError("a judge rollout names its comparison_id and the generator_model whose rubrics it saw")


class PairOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """One labelled comparison judged with a generated rubric set (both orders).

    `credit`: what it adds to the generator's reward: 1 when the winner is the label, the tie reward for a tie in
    both orders, 0 when wrong or inconsistent (a preference that flips with the order), None when the judge
    failed (left out of the reward)."""

    comparison_id: ComparisonId
    label: Winner
    winner: Winner | None = None
    consistent: bool | None = None
    credit: float | None = None
    error: str | None = None


class ArmReward(Message, tag="arm_reward", frozen=True, kw_only=True):
    """The reward of one ArmRollout.

    `reward` is None unless `status` is ok. An ok reward is either earned on the merits, or the stated penalty
    (RUBRICD_ARM_INVALID_REWARD) of a completion that could not be used: `penalty` then says why (a rubric set
    that broke the generation rules, a verdict that did not parse). Generator phase: `rubrics` (the generated set as
    validated, anchors first), `dropped` (its rubrics left out, and why), `outcomes` (each comparison judged),
    `judged` and `correct`. Judge phase: `winner` (what the verdict decides, in A/B terms) and `label`.
    `judge_model` and `generator_model` name both models' versions.
    """

    run_id: RunId
    rollout_id: RolloutId
    step: Step = 0
    phase: Phase | None = None  # None: a rejected entry that named no phase
    status: JudgeStatus
    reward: float | None = None
    penalty: str | None = None
    error: str | None = None
    prompt_id: InstanceKey | None = None
    comparison_id: ComparisonId | None = None
    order: Order | None = None
    rubrics: list[Rubric] = []
    dropped: list[str] = []
    outcomes: list[PairOutcome] = []
    judged: int = 0
    correct: int = 0
    winner: Winner | None = None
    label: Winner | None = None
    judge_model: str | None = None
    generator_model: str | None = None
    reward_ms: float | None = None
    rewarded_at: float | None = None


class RewardedArmRollout(Message, tag="arm_rewarded", frozen=True, kw_only=True):
    """A rollout with its first reward, kept per run for `rubricd export` (Keys.kept_arm_rollouts).

    Its tag is still `arm_rewarded`, the name it was stored under before."""

    rollout: ArmRollout
    reward: ArmReward


# What a step trains: one model, or both (a plan with simultaneous updates, the baseline alternation is compared to).
Training = Literal["generator", "judge", "both"]
Why = Literal["warm_up", "phase", "simultaneous"]


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """Which model each step of a run trains: `first` for `warm_up_steps` steps, then `phase_steps` steps of each
    in turn from `first`; with `simultaneous`, both every step."""

    first: Phase = "judge"
    phase_steps: Annotated[int, msgspec.Meta(ge=1)] = 10
    warm_up_steps: Annotated[int, msgspec.Meta(ge=0)] = 0
    simultaneous: bool = False

    def training(self, step: int) -> tuple[Training, Why]:
        """What `step` trains, and why."""
        if self.simultaneous:
            return "both", "simultaneous"
        if step < self.warm_up_steps:
            return self.first, "warm_up"
        other: Phase = "generator" if self.first == "judge" else "judge"
        turn = (step - self.warm_up_steps) // self.phase_steps
        return (self.first if turn % 2 == 0 else other), "phase"

    def turns(self, total_steps: int) -> list[tuple[Training, int, int]]:
        """The run's first `total_steps` steps as turns: (what they train, first step, how many steps), in order: a
        trainer loop trains one model per turn (with simultaneous updates, one turn of "both": each model trains
        over it, with its own trainer)."""
        out: list[tuple[Training, int, int]] = []
        for step in range(total_steps):
            training = self.training(step)[0]
            if out and out[-1][0] == training:
                out[-1] = (training, out[-1][1], out[-1][2] + 1)
            else:
                out.append((training, step, 1))
        return out

    def span(self, step: int) -> tuple[int, int]:
        """The first and last step of `step`'s phase (warm-up included in the first)."""
        if self.simultaneous:
            return 0, step
        if step < self.warm_up_steps + self.phase_steps:
            return 0, self.warm_up_steps + self.phase_steps - 1
        start = step - (step - self.warm_up_steps) % self.phase_steps
        return start, start + self.phase_steps - 1


class PhaseDecision(msgspec.Struct, frozen=True, kw_only=True):
    """What one step of a run trains, decided once for every trainer process, and the plan it followed."""

    step: int
    training: Training
    why: Why
    plan: Plan
    decided_at: float | None = None

    def admits(self, phase: Phase) -> bool:
        return self.training in (phase, "both")
