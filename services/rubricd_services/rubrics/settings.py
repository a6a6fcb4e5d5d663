"""Rubric generation's and promotion's settings, mixed into the settings of the services that use them (env prefix
RUBRICD_)."""

import msgspec
from pydantic import BaseModel, Field, model_validator

from rubricd.messages import Promotion, PromotionPlan
from rubricd_services.runtime.prompts import PromptFile
from rubricd_services.settings import Share


class GeneratorSettings(BaseModel):
    """Rubric generation settings (mixed into the scorer's and the comparer's)."""

    generate_rubrics: bool = Field(
        False,
        description="per_instance mode: the first rollout of an instance without a rubric set has the generator "
        "agent write that prompt's rubrics (anchors kept), stored as its version 1; a failure judges with the seed "
        "rubrics and is retried on a later step",
    )
    generator_prompt: PromptFile = Field(None, description="generator instructions; default: prompts/generator.md")
    generate_max_rubrics: int = Field(8, ge=1, le=20, description="the most rubrics the generator may write a prompt")
    generate_max_points: float = Field(
        10.0, gt=0, le=100, description="a generated rubric's points lie within -N..N (and are not zero)"
    )
    generation_lock_s: float = Field(
        10.0,
        ge=1,
        description="the generation lock's lifetime, renewed every third of it while its holder lives: a process "
        "that dies while generating holds the instance's other rollouts up this long",
    )

    @model_validator(mode="after")
    def _per_instance(self) -> "GeneratorSettings":
        """Generation writes per-instance sets: switched on in global mode, it would silently do nothing."""
        if self.generate_rubrics and getattr(self, "rubrics_mode", "per_instance") != "per_instance":
            raise ValueError("RUBRICD_GENERATE_RUBRICS writes per-instance sets: set RUBRICD_RUBRICS_MODE=per_instance")
        return self


class PromotionSettings(BaseModel):
    """How the runs' rubric changes take effect unless a run sets its own (`rubricd rubrics promotion`): the
    updater's, which proposes and decides, and the scorer's, which judges a candidate in shadow, so that a value out
    of range stops either at start (docs/researchers/promotion.md)."""

    promotion: Promotion = Field(
        "immediate",
        description="immediate: a proposal's version rewards the next rollouts; gated: it is a candidate judged in "
        "shadow for shadow_steps steps, then promoted or rejected by the gate (docs/researchers/promotion.md)",
    )
    shadow_steps: int = Field(1, ge=1, le=100, description="steps a candidate is judged in shadow (promotion gated)")
    honest_margin: Share = Field(
        0.05,
        description="how far a changed rubric may lower the mean reward of the rollouts analysed as honest (gated)",
    )
    interference_margin: Share = Field(
        0.0,
        description="how far the judge's canaries may agree less with their labels when a candidate's rubrics share "
        "their calls (gated)",
    )

    def promotion_plan(self) -> PromotionPlan:
        """The runs' promotion unless a run sets its own: the settings of the plan's own names."""
        return msgspec.convert(self, PromotionPlan, from_attributes=True)
