"""The summarizer's settings (env prefix RUBRICD_, see common.settings)."""

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from common.settings import ServiceSettings


class SummarizerSettings(ServiceSettings):
    rollouts_per_step: int | None = Field(None, ge=1, description="close a step after this many analyses, without StepClosed")
    step_deadline_s: float = Field(600.0, gt=0, description="after a step closes, summarize it with what has arrived by then")
    chunk_size: int = Field(20, ge=1, description="analyses per chunk summary; chunks run in parallel, then a meta-summary")
    claim_ttl_s: float = Field(300.0, gt=0, description="a summarizer's claim on a step lapses after this (so a dead one's step is retaken)")
    retry_after_s: float = Field(30.0, gt=0, description="a step whose summary failed (LLM down, ...) is retried after this")
    sweep_interval_s: float = Field(1.0, gt=0, description="how often open steps are checked for completeness and deadlines")
    max_analyses: int = Field(10_000, ge=1, description="most analyses of one step read from memory")
    rubrics_mode: Literal["global", "per_instance"] = "global"
    summarizer_prompt: Path | None = Field(None, description="chunk summary instructions; default: prompts/summarizer.md")
    meta_summarizer_prompt: Path | None = Field(None, description="meta-summary instructions; default: prompts/meta_summarizer.md")
    max_in_flight: int = Field(64, ge=1, description="stream entries handled at once")
    max_records: int = Field(32, ge=1, description="entries one read takes from a stream")
    reclaim_idle_ms: int = Field(60_000, ge=100, description="pending this long => reclaimed")
    max_deliveries: int = Field(3, ge=1, description="deliveries before a dead letter")
    stream_maxlen: int = Field(100_000, ge=1000, description="cap of output streams (summaries, events)")

    @field_validator("summarizer_prompt", "meta_summarizer_prompt")
    @classmethod
    def _exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"no such file: {path}")
        return path
