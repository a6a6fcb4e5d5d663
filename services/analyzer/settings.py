"""The analyzer's settings (env prefix RUBRICD_, see common.settings)."""

from pathlib import Path

from pydantic import Field, field_validator

from common.settings import ServiceSettings


class AnalyzerSettings(ServiceSettings):
    max_in_flight: int = Field(32, ge=1, description="rollouts analysed at once by one process")
    max_records: int = Field(8, ge=1, description="entries one read takes from the stream")
    reclaim_idle_ms: int = Field(60_000, ge=100, description="pending this long => reclaimed")
    max_deliveries: int = Field(3, ge=1, description="deliveries before a dead letter")
    analyzer_prompt: Path | None = Field(None, description="analyzer instructions; default: prompts/analyzer.md")
    stream_maxlen: int = Field(100_000, ge=1000, description="cap of output streams (analyses, events)")
    max_text_chars: int = Field(20_000, ge=1000, description="longer prompts/responses are cut in the analyzer prompt")

    @field_validator("analyzer_prompt")
    @classmethod
    def _exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"no such file: {path}")
        return path
