"""The updater's settings (env prefix RUBRICD_, see settings).

The memory switches are the paper's ablations: static memory (the last K step
summaries), dynamic memory (LLM-written queries over the run's memory) and
their budgets.
"""

from pydantic import Field, model_validator

from rubricd_services.rubrics.seeds import SeedSettings
from rubricd_services.rubrics.settings import PromotionSettings
from rubricd_services.runtime.prompts import PromptFile
from rubricd_services.settings import Count, Duration, InFlight, ReadSize, ServiceSettings


class UpdaterSettings(ServiceSettings, SeedSettings, PromotionSettings):
    max_in_flight: InFlight = 1  # updates of one run must not overtake each other
    max_records: ReadSize = 1
    update_frequency: Count = Field(1, description="rubrics are updated after every N-th step (steps 0, N, 2N, ...)")
    # Memory (ablation switches and budgets)
    static_memory: bool = Field(True, description="give the updater the last static_k step summaries")
    dynamic_memory: bool = Field(True, description="let the query writer search the run's memory")
    static_k: int = Field(3, ge=1, le=50, description="step summaries in static memory")
    max_queries: int = Field(4, ge=1, le=20, description="most queries the query writer may write")
    adaptive_queries: bool = Field(
        True, description="the query writer picks how many (up to max_queries); else exactly max_queries"
    )
    results_per_query: int = Field(5, ge=1, le=50, description="memories retrieved per query")
    # Validation bounds
    min_points: float = Field(-10.0, ge=-100, le=0, description="the lowest points a proposed rubric may have")
    max_points: float = Field(10.0, ge=0, le=100, description="the highest points a proposed rubric may have")
    max_adaptive: int = Field(12, ge=0, description="most adaptive rubrics a set may hold")
    # Prompts
    query_writer_prompt: PromptFile = Field(
        None, description="query writer instructions; default: prompts/query_writer.md"
    )
    updater_prompt: PromptFile = Field(None, description="updater instructions; default: prompts/updater.md")
    update_lock_s: Duration = Field(
        15.0, description="a run's update lock, renewed while its holder lives, expires this long after it died"
    )

    @model_validator(mode="after")
    def _bounds(self) -> "UpdaterSettings":
        if self.min_points >= self.max_points:
            raise ValueError(f"min_points ({self.min_points}) must be below max_points ({self.max_points})")
        return self
