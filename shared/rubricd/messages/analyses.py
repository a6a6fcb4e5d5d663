"""What the analyzer and summarizer produce (the evaluation memory's content)."""

import enum

import msgspec

from ._base import InstanceKey, Message, RolloutId, RunId, Step, UnitInterval, Version
from .rollouts import AnalysisSample


class Severity(enum.StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class HackingEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """One sign of reward hacking, quoted from the response; in a trajectory, `turns` are the turns (trajectory
    indices) it quotes."""

    type: str  # e.g. padding, sycophancy, judge_addressing, format_gaming, fabricated_tool_result
    evidence: str
    severity: Severity = Severity.MEDIUM
    turns: list[int] = []


class RubricFinding(msgspec.Struct, frozen=True, kw_only=True):
    """A rubric that was gamed or miscalibrated, or one that is missing."""

    finding: str  # gamed | miscalibrated | missing
    note: str
    rubric_id: str | None = None


class StepSample(msgspec.Struct, frozen=True, kw_only=True):
    """What of a step the analyzers read when the analysis sample left some rollouts out (Rollout.analysis_sample):
    the `rule` (`extremes`, or k per group), the rollouts `analyzed` and those `scored` the sample chose from
    (analyzed, left out, or given up on), over the whole step."""

    rule: AnalysisSample
    analyzed: int
    scored: int


class RolloutAnalysis(Message, tag="rollout_analysis", frozen=True, kw_only=True):
    """A deep look at one scored rollout, stored in memory and announced."""

    run_id: RunId
    rollout_id: RolloutId
    step: Step
    rubric_version: Version
    instance_key: InstanceKey | None = None
    quality: str  # relative to this stage of training
    quality_score: UnitInterval = 0.5
    reward: float | None = None
    reward_hacking: list[HackingEvidence] = []
    rubric_findings: list[RubricFinding] = []
    advancement: list[str] = []
    observations: list[str] = []


class HackingPattern(msgspec.Struct, frozen=True, kw_only=True):
    """Reward hacking seen across a step."""

    type: str
    rollouts: int
    description: str
    severity: Severity = Severity.MEDIUM


class RubricHealth(msgspec.Struct, frozen=True, kw_only=True):
    """How one rubric judged a step's training rollouts (ok scores): met in `met_rate` of its `rollouts`, which came
    in `groups` sample groups (the rollouts that name none count as one group); `groups_with_spread` of them hold
    both a response that met it and one that did not. `uninformative`: no group has spread (each group's responses
    all met it, or none did), so it gave the policy no signal to learn from within a group at this step.
    `voted`: the rollouts judged by votes (Score.votes > 1), `votes_split` those whose votes disagreed on it. What to
    do about it: docs/researchers/groups.md, "Rubric health".
    """

    rubric_id: str
    met_rate: UnitInterval
    rollouts: int
    groups: int
    groups_with_spread: int
    uninformative: bool
    voted: int = 0
    votes_split: int = 0


class StepSummary(Message, tag="step_summary", frozen=True, kw_only=True):
    """A step's analyses, aggregated; announced to the updater."""

    run_id: RunId
    step: Step
    instance_key: InstanceKey | None = None
    executive_summary: str
    systemic_patterns: list[str] = []
    reward_hacking: list[HackingPattern] = []
    rubric_evaluation: str = ""
    advancement: list[str] = []
    evolution_plan: list[str] = []
    memory_entry: str = ""
    analyses: int = 0
    sampled: StepSample | None = None  # None: every scored rollout was analyzed (no sample left one out)
    missing_rollouts: list[RolloutId] = []
    chunks: int = 1
    expected_rollouts: int | None = None  # how many the trainer published, when it said
    missing_parts: int = 0  # closed in parts (StepClosed.parts): the parts that never closed it, e.g. a dead rank
    health: list[RubricHealth] = []  # each rubric's health over every ok score of the step's training rollouts
