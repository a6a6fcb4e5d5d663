"""What the scorer produces."""

import enum
from typing import Literal

import msgspec

from ._base import GroupId, InstanceKey, Message, RolloutId, RunId, Step, UnitInterval, Version
from .rollouts import Rollout


class JudgeStatus(enum.StrEnum):
    """How a score came about. Only `ok` carries a reward."""

    OK = "ok"
    JUDGE_FAILED = "judge_failed"  # the LLM call failed after its retries
    REJECTED = "rejected"  # the rollout broke a limit (size, reply_to, ...)


class RubricResult(msgspec.Struct, frozen=True, kw_only=True):
    """The judge's verdict on one rubric of the set.

    For a turn rubric (Rubric.scope) judged on a trajectory, `met_turns` and `unmet_turns` name the policy's
    turns (trajectory indices) that meet the criterion and those that do not; `met` is then true when some turn
    meets it and, for positive points, none fails it.
    """

    rubric_id: str
    met: bool
    points: float
    explanation: str = ""
    met_turns: list[int] = []
    unmet_turns: list[int] = []
    agreement: UnitInterval | None = None  # judged by votes: the share of them that gave this verdict


class TurnResult(msgspec.Struct, frozen=True, kw_only=True):
    """One policy turn of a trajectory as the turn rubrics found it: `points`, the sum of the points of the
    rubrics it meets (a negative rubric met there costs its points), and which rubrics it meets and fails.
    Per-turn rewards for trainers that take them (verl's `turn_scores`)."""

    turn: int
    points: float
    met: list[str] = []
    unmet: list[str] = []


class GroupJudged(msgspec.Struct, frozen=True, kw_only=True):
    """How a response was judged with its group: `members` responses in one call (a sub-group when the group
    was larger than the judge's budget; members with the same response are shown once), this one shown as
    `label`, at `positions` (0 first: one per vote, each vote turning the order one place)."""

    members: int
    label: str
    positions: list[int] = []


class CandidateScore(msgspec.Struct, frozen=True, kw_only=True):
    """The rollout under a candidate rubric set in shadow (promotion `gated`), never its reward: the candidate
    proposed from `step`, as `version` would reward it; `results`, the verdicts on its added and modified rubrics
    (the others are the Score's own)."""

    step: Step
    version: Version
    reward: float | None
    weighted_total: float | None = None
    results: list[RubricResult] = []


class Score(Message, tag="score", frozen=True, kw_only=True):
    """The reward for one rollout, and how it was reached.

    `reward` is None unless `status` is ok: a failed judge is never a silent 0.
    `meta_class_scores` holds HealthBench's score of each meta-class alone, for the classes where it is defined;
    `undefined_meta_classes` names those without a positive-point rubric, which have no score (HealthBench's None;
    kept out of the map so that readers of `dict[str, float]` still decode it). `weighted_total` is the weighted
    sum over every rubric, the reward under `weighted_sum`.
    `active_meta_class` (policy `alternating`): the step's class, whose score is the reward; None during warm-up
    (the reward is the weighted total). If that class is undefined for this rollout the reward is the weighted
    total, or, with RUBRICD_UNDEFINED_META_CLASS_REWARD=mask, None with `masked` true (status ok): drop the sample.
    `judge_cached`: the verdict was the judge cache's, kept from the same judge call (same content, rubric set
    and version, judge model and prompt) for an earlier rollout; no LLM call was made.
    `rubrics_generation` (per-instance sets with RUBRICD_GENERATE_RUBRICS): `generated` when the set judged with
    is the one the rubric generator wrote for this instance, `fallback` when its generation failed and the seed
    rubrics judged instead (`rubric_version` 0 while no set is stored; retried on a later step), with the
    generation's error in `rubrics_generation_error` (`error` stays the reason for a missing reward); None when
    no generation was involved (generation off, a predefined or imported set, or a later version the updater
    made).
    `evaluation`: the rollout was an evaluation rollout (Rollout.evaluation).
    `turns` (a trajectory's Score): one result per policy turn, in order, when the set has turn rubrics.
    `group`: the rollout's sample group (Rollout.group); `grouping` says how it was judged with it (group
    judging), None when it was judged alone. `votes`: the judge calls whose majority decided each rubric;
    `agreement`, with more than one, the mean over rubrics of the share of votes that gave the verdict (1:
    unanimous). `candidate`: the same verdicts under a rubric set in shadow, if the run has one (never the reward).
    """

    run_id: RunId
    rollout_id: RolloutId
    step: Step
    status: JudgeStatus
    reward: float | None
    rubric_version: Version
    instance_key: InstanceKey | None = None
    results: list[RubricResult] = []
    meta_class_scores: dict[str, float] = {}
    policy: str = "weighted_sum"
    error: str | None = None
    judge_ms: float | None = None
    scored_at: float | None = None
    judge_cached: bool = False
    weighted_total: float | None = None
    undefined_meta_classes: list[str] = []
    active_meta_class: str | None = None
    masked: bool = False
    rubrics_generation: Literal["generated", "fallback"] | None = None
    rubrics_generation_error: str | None = None
    evaluation: bool = False
    turns: list[TurnResult] = []
    group: GroupId | None = None
    grouping: GroupJudged | None = None
    votes: int = 1
    agreement: UnitInterval | None = None
    candidate: CandidateScore | None = None


class ScoredRollout(Message, tag="scored_rollout", frozen=True, kw_only=True):
    """A rollout with its score, handed to the analyzers; with its first score, kept per run for `rubricd
    rescore` (Keys.kept_rollouts)."""

    rollout: Rollout
    score: Score
