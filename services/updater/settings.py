"""The updater's settings (env prefix RUBRICD_, see common.settings).

The memory switches are the paper's ablations: static memory (the last K step
summaries), dynamic memory (LLM-written queries over the run's memory) and
their budgets.
"""

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from common.seeds import SeedSettings
from common.settings import ServiceSettings


class UpdaterSettings(ServiceSettings, SeedSettings):
    update_frequency: int = Field(1, ge=1, description="rubrics are updated after every N-th step (steps 0, N, 2N, ...)")
    rubrics_mode: Literal["global", "per_instance"] = "global"
    # Memory (ablation switches and budgets)
    static_memory: bool = Field(True, description="give the updater the last static_k step summaries")
    dynamic_memory: bool = Field(True, description="let the query writer search the run's memory")
    static_k: int = Field(3, ge=1, le=50, description="step summaries in static memory")
    max_queries: int = Field(4, ge=1, le=20, description="most queries the query writer may write")
    adaptive_queries: bool = Field(True, description="the query writer picks how many (up to max_queries); else exactly max_queries")
    results_per_query: int = Field(5, ge=1, le=50, description="memories retrieved per query")
    # Validation bounds
    min_points: float = Field(-10.0, ge=-100, le=0)
    max_points: float = Field(10.0, ge=0, le=100)
    max_adaptive: int = Field(12, ge=0, description="most adaptive rubrics a set may hold")
    # Prompts
    query_writer_prompt: Path | None = Field(None, description="query writer instructions; default: prompts/query_writer.md")
    updater_prompt: Path | None = Field(None, description="updater instructions; default: prompts/updater.md")
    # Delivery
    reclaim_idle_ms: int = Field(60_000, ge=100, description="pending this long => reclaimed")
    max_deliveries: int = Field(3, ge=1, description="deliveries before a dead letter")
    lock_timeout_s: float = Field(300.0, gt=0, description="an update lock held longer expires (its holder died)")
    stream_maxlen: int = Field(100_000, ge=1000, description="cap of output streams (rubrics-updated, events)")

    @field_validator("query_writer_prompt", "updater_prompt")
    @classmethod
    def _exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"no such file: {path}")
        return path

    @model_validator(mode="after")
    def _bounds(self) -> "UpdaterSettings":
        if self.min_points >= self.max_points:
            raise ValueError(f"min_points ({self.min_points}) must be below max_points ({self.max_points})")
        return self
