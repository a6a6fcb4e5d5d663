"""rubricd: rubric-based rewards whose rubrics evolve from an evaluation memory.

This package is the shared contract (message schemas, stream names, the wire
format, reward policies, the rubric store), what readers read from Redis (rubric
history, the schedule, usage, events) and the trainer client. It depends only on
msgspec and redis, so a training environment can install it alone.
"""

from .client import (
    ArmRewardTimeout,
    InvalidRollout,
    PreferenceTimeout,
    ReplyTimeout,
    RubricdClient,
    ScoreTimeout,
    SyncRubricdClient,
)
from .keys import Keys
from .messages import (
    ArmReward,
    ArmRollout,
    Comparison,
    JudgeStatus,
    Preference,
    Rollout,
    Rubric,
    RubricSet,
    Score,
    TrainingContext,
)

__all__ = [
    "ArmReward",
    "ArmRewardTimeout",
    "ArmRollout",
    "Comparison",
    "InvalidRollout",
    "JudgeStatus",
    "Keys",
    "Preference",
    "PreferenceTimeout",
    "ReplyTimeout",
    "Rollout",
    "Rubric",
    "RubricSet",
    "RubricdClient",
    "Score",
    "ScoreTimeout",
    "SyncRubricdClient",
    "TrainingContext",
]
