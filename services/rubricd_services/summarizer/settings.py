"""The summarizer's settings (env prefix RUBRICD_, see settings)."""

from pydantic import Field, field_validator

from rubricd_services.memory.store import MemoryKind
from rubricd_services.runtime.prompts import PromptFile
from rubricd_services.settings import Count, Duration, InFlight, ReadSize, ServiceSettings


class SummarizerSettings(ServiceSettings):
    max_in_flight: InFlight = 64
    max_records: ReadSize = 32
    rollouts_per_step: Count | None = Field(
        None, description="close a step after this many analyses, without StepClosed"
    )
    step_deadline_s: Duration = Field(
        600.0, description="after a step closes, summarize it with what has arrived by then"
    )
    step_quiet_s: float = Field(
        5.0,
        ge=0,
        description="a step closed by closers that cannot name their part (StepClosed.closer: a framework's reward "
        "workers that do not know each other) is complete only this long after its last closer's closure",
    )
    unclosed_step_s: Duration = Field(
        600.0,
        description="a step that no closure closed (its trainer's processes ended without closing their last step, "
        "as Ray's actors may) is summarized this long after its latest analysis, with what arrived",
    )
    chunk_size: Count = Field(20, description="analyses per chunk summary; chunks run in parallel, then a meta-summary")
    claim_ttl_s: Duration = Field(
        15.0,
        description="a summarizer's claim on a step, renewed while it works, lapses this long after it died",
    )
    retry_after_s: Duration = Field(
        10.0, description="a step whose summary failed (LLM down, ...) is retried after this"
    )
    sweep_interval_s: Duration = Field(
        1.0, description="how often open steps are checked for completeness and deadlines"
    )
    max_analyses: Count = Field(10_000, description="most analyses of one step read from memory")
    summarizer_prompt: PromptFile = Field(
        None, description="chunk summary instructions; default: prompts/summarizer.md"
    )
    meta_summarizer_prompt: PromptFile = Field(
        None, description="meta-summary instructions; default: prompts/meta_summarizer.md"
    )
    memory_keep_steps: dict[str, int] = Field(
        {},
        description="retention: per memory kind (analysis, chunk_summary, step_summary), the run's last N steps "
        'kept, older ones deleted after each step\'s summary, e.g. {"analysis": 20, "chunk_summary": 100}; a kind '
        "not named, and the rubric history (rubric_update), are kept for good; a step still open is never deleted",
    )

    @field_validator("memory_keep_steps")
    @classmethod
    def _retention(cls, keep: dict[str, int]) -> dict[str, int]:
        for kind, steps in keep.items():
            if kind == MemoryKind.RUBRIC_UPDATE:
                raise ValueError("rubric_update is the rubric history: it is always kept, name no retention for it")
            if kind not in KEPT_FOR_STEPS:
                raise ValueError(f"unknown memory kind {kind!r}; kinds with a retention: {', '.join(KEPT_FOR_STEPS)}")
            if steps < 1:
                raise ValueError(f"{kind}: {steps} steps; at least 1 (the step just summarized)")
        return keep


KEPT_FOR_STEPS = (MemoryKind.ANALYSIS, MemoryKind.CHUNK_SUMMARY, MemoryKind.STEP_SUMMARY)  # kinds a retention may name
