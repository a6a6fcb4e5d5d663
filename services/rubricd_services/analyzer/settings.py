"""The analyzer's settings (env prefix RUBRICD_, see settings)."""

from typing import Annotated, Literal

from pydantic import Field

from rubricd.messages import MAX_GROUP
from rubricd_services.runtime.prompts import PromptFile
from rubricd_services.settings import Duration, ServiceSettings

# Rollout.analysis_sample's values, as a setting: every rollout, each group's best and worst, or k per group.
AnalysisSample = Literal["all", "extremes"] | Annotated[int, Field(ge=1, le=MAX_GROUP)]


class AnalyzerSettings(ServiceSettings):
    analyzer_prompt: PromptFile = Field(None, description="analyzer instructions; default: prompts/analyzer.md")
    max_text_chars: int = Field(20_000, ge=1000, description="longer prompts/responses are cut in the analyzer prompt")
    analysis_sample: AnalysisSample = Field(
        "all",
        description="which scored rollouts of a sample group are analyzed, unless a rollout says (analysis_sample): "
        "all, extremes (each group's best and worst by reward), or k (the first k of each group to arrive); "
        "rollouts without a group are all analyzed",
    )
    group_deadline_s: Duration = Field(
        30.0,
        description="extremes: a group not complete this long after its first member arrived (no group_size, or "
        "members lost) is decided with the members that did; keep it well under the summarizer's step_deadline_s",
    )
