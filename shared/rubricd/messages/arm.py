"""Rubric-ARM training: the rollouts of its two models, and their rewards.

A trainer training Rubric-ARM's rubric generator or its judge publishes each completion as an ArmRollout on the
arm stream; the arm service rewards it against the run's imported preference pairs and answers an ArmReward on
the trainer's reply stream. The rules: docs/researchers/rubric-arm.md, "Training the generator and the judge".
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

    `phase` says which model wrote `completion`: `generator` (a candidate rubric set for the preference prompt
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
    """One labelled comparison judged with a candidate rubric set (both orders).

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
    that broke the generation rules, a verdict that did not parse). Generator phase: `rubrics` (the candidate as
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
