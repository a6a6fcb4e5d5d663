"""The scorer's settings (env prefix RUBRICD_, see common.settings)."""

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from common.seeds import SeedSettings
from common.settings import ServiceSettings
from rubricd.reward import POLICIES


class ScorerSettings(ServiceSettings, SeedSettings):
    max_in_flight: int = Field(256, ge=1, description="rollouts judged at once by one process")
    max_records: int = Field(32, ge=1, description="entries one read takes from the stream")
    reclaim_idle_ms: int = Field(60_000, ge=100, description="pending this long => reclaimed")
    max_deliveries: int = Field(3, ge=1, description="deliveries before a dead letter")
    max_rollout_bytes: int = Field(1_000_000, ge=1024)
    reward_policy: str = "weighted_sum"
    rubrics_mode: Literal["global", "per_instance"] = "global"
    judge_prompt: Path | None = Field(None, description="judge instructions; default: prompts/judge.md")
    score_ttl_s: int = Field(3600, ge=60, description="how long a score is kept for redelivery; memory is about rate x ttl x 1 KB")
    stream_maxlen: int = Field(100_000, ge=1000, description="cap of output streams (scored, events, replies)")
    reply_ttl_s: int = Field(24 * 3600, ge=60, description="an idle reply stream expires after this")
    trim_interval_s: float = Field(5.0, gt=0)

    @field_validator("reward_policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        if name not in POLICIES:
            raise ValueError(f"unknown reward policy {name!r}; known: {sorted(POLICIES)}")
        return name

    @field_validator("judge_prompt")
    @classmethod
    def _exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"no such file: {path}")
        return path
