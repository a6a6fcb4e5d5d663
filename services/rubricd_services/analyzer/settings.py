"""The analyzer's settings (env prefix RUBRICD_, see common.settings)."""

from pydantic import Field

from rubricd_services.common.prompts import PromptFile
from rubricd_services.common.settings import ServiceSettings


class AnalyzerSettings(ServiceSettings):
    analyzer_prompt: PromptFile = Field(None, description="analyzer instructions; default: prompts/analyzer.md")
    max_text_chars: int = Field(20_000, ge=1000, description="longer prompts/responses are cut in the analyzer prompt")
