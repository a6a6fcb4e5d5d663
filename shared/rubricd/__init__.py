"""rubricd: rubric-based rewards whose rubrics evolve from an evaluation memory.

This package is the shared contract (message schemas, stream and key names, the
wire format, the JSON Schema) and what a trainer runs: the client, the framework
adapters and the read-only view of the rubric sets they wait on. What the services
keep in Redis is theirs (rubricd_services.state). It depends only on msgspec and
redis, so a training environment can install it alone.
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
