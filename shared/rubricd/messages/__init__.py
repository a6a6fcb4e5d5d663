"""Every message of the loop, one module per family.

All are frozen msgspec Structs tagged by a `type` field; schemas evolve only
additively (new fields have defaults).
"""

from ._base import GroupId, InstanceKey, Message, RolloutId, RunId
from .analyses import (
    HackingEvidence,
    HackingPattern,
    RolloutAnalysis,
    RubricFinding,
    RubricHealth,
    Severity,
    StepSample,
    StepSummary,
)
from .arm import ArmReward, ArmRollout, ModelName, PairOutcome, Phase, RewardedArmRollout
from .comparisons import (
    Comparison,
    ComparisonId,
    JudgedComparison,
    Order,
    OrderJudgment,
    PairResult,
    Preference,
    Winner,
)
from .events import RENAMED_KINDS, UPDATE_OUTCOMES, DeadLetter, Event, EventKind
from .rollouts import AnalysisSample, JudgeMode, Rollout, StepClosed, TrainingContext, instance_key
from .rubrics import (
    HEALTHBENCH_AXES,
    Action,
    GeneratedBy,
    Rubric,
    RubricKind,
    RubricModification,
    RubricSet,
    RubricsUpdated,
    Scope,
    Strategy,
)
from .scores import GroupJudged, JudgeStatus, RubricResult, Score, ScoredRollout, TurnResult
from .trajectories import Function, FunctionSpec, Part, Tool, ToolCall, Turn

# Every top-level message type, for schema export and docs.
MESSAGES: tuple[type[Message], ...] = (
    Rollout,
    StepClosed,
    Score,
    ScoredRollout,
    RolloutAnalysis,
    StepSummary,
    RubricSet,
    RubricsUpdated,
    Event,
    DeadLetter,
    Comparison,
    Preference,
    JudgedComparison,
    ArmRollout,
    ArmReward,
    RewardedArmRollout,
)

__all__ = [
    "HEALTHBENCH_AXES",
    "MESSAGES",
    "RENAMED_KINDS",
    "UPDATE_OUTCOMES",
    "Action",
    "AnalysisSample",
    "GroupId",
    "GroupJudged",
    "JudgeMode",
    "Function",
    "FunctionSpec",
    "Part",
    "Scope",
    "Tool",
    "ToolCall",
    "Turn",
    "TurnResult",
    "ArmReward",
    "ArmRollout",
    "Comparison",
    "ComparisonId",
    "DeadLetter",
    "Event",
    "EventKind",
    "GeneratedBy",
    "HackingEvidence",
    "HackingPattern",
    "InstanceKey",
    "JudgeStatus",
    "JudgedComparison",
    "Message",
    "ModelName",
    "Order",
    "OrderJudgment",
    "PairOutcome",
    "PairResult",
    "Phase",
    "Preference",
    "RewardedArmRollout",
    "Rollout",
    "RolloutAnalysis",
    "RolloutId",
    "Rubric",
    "RubricFinding",
    "RubricHealth",
    "RubricKind",
    "RubricModification",
    "RubricResult",
    "RubricSet",
    "RubricsUpdated",
    "RunId",
    "Score",
    "ScoredRollout",
    "Severity",
    "StepClosed",
    "StepSample",
    "StepSummary",
    "Strategy",
    "TrainingContext",
    "Winner",
    "instance_key",
]
