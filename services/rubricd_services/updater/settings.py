"""The updater's settings (env prefix RUBRICD_, see settings).

The memory switches are the paper's ablations: static memory (the last K step
summaries), dynamic memory (LLM-written queries over the run's memory) and
their budgets.
"""

from pydantic import Field, model_validator

from rubricd.messages import Promotion, PromotionPlan
from rubricd_services.rubrics.seeds import SeedSettings
from rubricd_services.runtime.prompts import PromptFile
from rubricd_services.settings import InFlight, ReadSize, ServiceSettings


class UpdaterSettings(ServiceSettings, SeedSettings):
    max_in_flight: InFlight = 1  # updates of one run must not overtake each other
    max_records: ReadSize = 1
    update_frequency: int = Field(
        1, ge=1, description="rubrics are updated after every N-th step (steps 0, N, 2N, ...)"
    )
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
    # Promotion (a run's own: `rubricd rubrics promotion`)
    promotion: Promotion = Field(
        "immediate",
        description="immediate: a proposal's version rewards the next rollouts; gated: it is a candidate judged in "
        "shadow for shadow_steps steps, then promoted or rejected by the gate (docs/researchers/promotion.md)",
    )
    shadow_steps: int = Field(1, ge=1, le=100, description="steps a candidate is judged in shadow (promotion gated)")
    honest_margin: float = Field(
        0.05,
        ge=0,
        le=1,
        description="how far a changed rubric may lower the mean reward of the rollouts analysed as honest (gated)",
    )
    update_lock_s: float = Field(
        15.0, gt=0, description="a run's update lock, renewed while its holder lives, expires this long after it died"
    )

    def promotion_plan(self) -> PromotionPlan:
        """The runs' promotion unless a run sets its own."""
        return PromotionPlan(promotion=self.promotion, shadow_steps=self.shadow_steps, honest_margin=self.honest_margin)

    @model_validator(mode="after")
    def _bounds(self) -> "UpdaterSettings":
        if self.min_points >= self.max_points:
            raise ValueError(f"min_points ({self.min_points}) must be below max_points ({self.max_points})")
        return self
