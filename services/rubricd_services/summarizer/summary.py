"""Summarizing one step: chunks of analyses, chunk summaries in parallel, a meta-summary.

Plain async Python: a test hands in the analyses and two agent functions and
needs no broker. The instructions are the system message (stable, cacheable);
the analyses follow as JSON data with `<` escaped, and beside them how many
analyses report each hacking type, counted, so that a step's shares (of an
agent's tool-use hacks too) are exact.
"""

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

import msgspec

from rubricd.messages import (
    HackingEvidence,
    HackingPattern,
    RolloutAnalysis,
    RubricFinding,
    RubricHealth,
    Severity,
    StepSample,
    StepSummary,
)
from rubricd_services.runtime import prompts

# The agents: settings `agents.<name>`, prompts prompts/<name>.md.
SUMMARIZER = "summarizer"  # one chunk of a step's analyses
META_SUMMARIZER = "meta_summarizer"  # the chunk summaries of a large step, merged


_FRAME_CHARS = 800  # the step block (its hacking counts included) and the tags around the data
_HACKING_TYPES = 8  # the step block counts the analyses of this many hacking types, the most reported


Line = Annotated[str, prompts.max_chars(240)]


class PatternDraft(msgspec.Struct, frozen=True, kw_only=True):
    type: Annotated[str, prompts.max_chars(40)]
    rollouts: int
    description: Line
    severity: Severity


class SummaryDraft(msgspec.Struct, frozen=True, kw_only=True):
    """What the summarizer and meta_summarizer agents return (every field required)."""

    executive_summary: Annotated[str, prompts.max_chars(600)]
    systemic_patterns: Annotated[list[Line], prompts.max_items(4)]
    reward_hacking: Annotated[list[PatternDraft], prompts.max_items(4)]
    rubric_evaluation: Annotated[str, prompts.max_chars(400)]
    advancement: Annotated[list[Line], prompts.max_items(3)]
    evolution_plan: Annotated[list[Line], prompts.max_items(4)]
    memory_entry: Annotated[str, prompts.max_chars(600)]


Agent = Callable[[list[dict[str, str]]], Awaitable[SummaryDraft]]


@dataclass(frozen=True)
class StepInfo:
    """What the prompt says about the step being summarized."""

    run_id: str
    step: int
    instance_key: str | None = None
    expected: int | None = None  # rollouts the trainer published, if it said
    missing: tuple[str, ...] = ()
    missing_parts: int = 0  # closed in parts: the parts that never closed the step
    sampled: StepSample | None = None  # the analyses are a sample of the step's scored rollouts: which
    health: tuple[
        RubricHealth, ...
    ] = ()  # every rubric's health (rubricd_services.state.health), carried into the summary


@dataclass(frozen=True)
class Summarized:
    """A step summary and the chunk summaries it was merged from."""

    summary: StepSummary
    chunks: list[SummaryDraft]


class _StepView(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    step: int
    instance_key: str | None
    rollouts_expected: int | None
    analyses: int
    missing_rollouts: int
    chunk: int | None = None
    chunks: int | None = None
    hacking_rollouts: dict[str, int] = {}  # hacking type -> the analyses that report it, most reported first


class _SampledStepView(_StepView, frozen=True, kw_only=True):
    """A step whose analyses are a sample of its scored rollouts (StepSample: the rule, analyzed of scored)."""

    sample: StepSample


class _AnalysisView(msgspec.Struct, frozen=True, kw_only=True):
    """What the summarizer is shown of an analysis: the fields named here, copied by name (`_view`)."""

    rollout_id: str
    reward: float | None
    quality_score: float
    quality: str
    reward_hacking: list[HackingEvidence]
    rubric_findings: list[RubricFinding]
    advancement: list[str]
    observations: list[str]


class _ChunkView(msgspec.Struct, frozen=True, kw_only=True):
    """What the meta-summarizer is shown of a chunk: its number and size, and the fields of its summary named here."""

    chunk: int
    analyses: int
    executive_summary: str
    systemic_patterns: list[str]
    reward_hacking: list[PatternDraft]
    rubric_evaluation: str
    advancement: list[str]
    evolution_plan: list[str]


def chunked(analyses: list[RolloutAnalysis], size: int, max_chars: int | None = None) -> list[list[RolloutAnalysis]]:
    """Analyses in rollout-id order, cut into chunks of at most `size`, and of at most `max_chars` of data (an
    analysis larger than that alone is cut in `_view`); none for no analyses."""
    chunks: list[list[RolloutAnalysis]] = []
    used = 0
    for analysis in sorted(analyses, key=lambda a: a.rollout_id):
        chars = len(prompts.as_data(_view(analysis)))
        if not chunks or len(chunks[-1]) >= size or (max_chars is not None and used + chars > max_chars):
            chunks.append([])
            used = 0
        chunks[-1].append(analysis)
        used += chars
    return chunks


def _view(a: RolloutAnalysis, max_chars: int | None = None) -> _AnalysisView:
    """The analysis as the summarizer sees it; with `max_chars`, its prose cut (prompts.fit) to fit that."""
    view = msgspec.convert(a, _AnalysisView, from_attributes=True)  # the fields the view names
    over = 0 if max_chars is None else len(prompts.as_data(view)) - max_chars
    if over <= 0:
        return view
    prose = [a.quality, *a.advancement, *a.observations]
    cut = prompts.fit(prose, max(0, sum(map(prompts.size, prose)) - over))
    n = len(a.advancement)
    return msgspec.structs.replace(view, quality=cut[0], advancement=cut[1 : 1 + n], observations=cut[1 + n :])


def hacking_rollouts(analyses: list[RolloutAnalysis]) -> dict[str, int]:
    """How many of `analyses` report each hacking type (once per analysis): the `_HACKING_TYPES` most reported."""
    counts = Counter(t for a in analyses for t in {e.type[:40] for e in a.reward_hacking})
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:_HACKING_TYPES])


def _step_view(
    info: StepInfo,
    analyses: int,
    chunk: int | None = None,
    chunks: int | None = None,
    hacking: dict[str, int] | None = None,
) -> _StepView:
    view = _StepView(
        run_id=info.run_id,
        step=info.step,
        instance_key=info.instance_key,
        rollouts_expected=info.expected,
        analyses=analyses,
        missing_rollouts=len(info.missing),
        chunk=chunk,
        chunks=chunks,
        hacking_rollouts=hacking or {},
    )
    if info.sampled is None:
        return view
    return _SampledStepView(**msgspec.structs.asdict(view), sample=info.sampled)


def data_chars(template: str, prompt_chars: int | None) -> int | None:
    """What an agent's prompt budget (LLMSettings.prompt_chars) leaves for the data beside its instructions."""
    return None if prompt_chars is None else max(prompt_chars - len(template) - _FRAME_CHARS, _FRAME_CHARS)


def chunk_messages(
    template: str,
    info: StepInfo,
    chunk: list[RolloutAnalysis],
    index: int,
    total: int,
    analyses: int,
    max_chars: int | None = None,
) -> list[dict[str, str]]:
    """The summarizer's chat for one chunk (made by `chunked` with the same `max_chars`)."""
    user = (
        prompts.block("step", _step_view(info, analyses, index, total, hacking_rollouts(chunk)))
        + "\n"
        + prompts.block("analyses", [_view(a, max_chars) for a in chunk])
    )
    return [{"role": "system", "content": template.rstrip() + "\n"}, {"role": "user", "content": user}]


def meta_messages(
    template: str,
    info: StepInfo,
    drafts: list[SummaryDraft],
    sizes: list[int],
    max_chars: int | None = None,
    hacking: dict[str, int] | None = None,
) -> list[dict[str, str]]:
    """The meta-summarizer's chat; with `max_chars`, the chunk summaries' prose is cut (prompts.fit) to fit it.
    `hacking`: the step's `hacking_rollouts`."""
    views = [
        msgspec.convert({**msgspec.structs.asdict(d), "chunk": i, "analyses": n}, _ChunkView)  # the fields it names
        for i, (d, n) in enumerate(zip(drafts, sizes))
    ]
    over = 0 if max_chars is None else len(prompts.as_data(views)) - max_chars
    if over > 0:
        prose = [text for v in views for text in (v.executive_summary, v.rubric_evaluation)]
        prose = prompts.fit(prose, max(0, sum(map(prompts.size, prose)) - over))
        views = [
            msgspec.structs.replace(v, executive_summary=prose[2 * i], rubric_evaluation=prose[2 * i + 1])
            for i, v in enumerate(views)
        ]
    user = (
        prompts.block("step", _step_view(info, sum(sizes), None, len(drafts), hacking))
        + "\n"
        + prompts.block("chunk_summaries", views)
    )
    return [{"role": "system", "content": template.rstrip() + "\n"}, {"role": "user", "content": user}]


async def summarize_step(
    info: StepInfo,
    analyses: list[RolloutAnalysis],
    *,
    chunk_size: int,
    templates: tuple[str, str],
    summarizer: Agent,
    meta_summarizer: Agent,
    prompt_chars: tuple[int | None, int | None] = (None, None),
) -> Summarized:
    """Chunk summaries in parallel, merged by the meta-summarizer (skipped for one chunk). `prompt_chars`: the
    two agents' prompt budgets (LLMSettings.prompt_chars); chunks are made small enough to fit the first.

    A step with no analyses at all (every one missing at the deadline) gets a
    summary that says so, without an LLM call.
    """
    room = data_chars(templates[0], prompt_chars[0]), data_chars(templates[1], prompt_chars[1])
    chunks = chunked(analyses, chunk_size, room[0])
    if not chunks:
        return Summarized(empty_summary(info), [])
    drafts = list(
        await asyncio.gather(
            *(
                summarizer(chunk_messages(templates[0], info, chunk, i, len(chunks), len(analyses), room[0]))
                for i, chunk in enumerate(chunks)
            )
        )
    )
    merged = (
        drafts[0]
        if len(drafts) == 1
        else await meta_summarizer(
            meta_messages(templates[1], info, drafts, [len(c) for c in chunks], room[1], hacking_rollouts(analyses))
        )
    )
    return Summarized(step_summary(info, merged, analyses=len(analyses), chunks=len(chunks)), drafts)


def step_summary(info: StepInfo, draft: SummaryDraft, *, analyses: int, chunks: int) -> StepSummary:
    return StepSummary(
        run_id=info.run_id,
        step=info.step,
        instance_key=info.instance_key,
        executive_summary=draft.executive_summary,
        systemic_patterns=list(draft.systemic_patterns),
        reward_hacking=[
            HackingPattern(
                type=p.type, rollouts=max(0, min(p.rollouts, analyses)), description=p.description, severity=p.severity
            )
            for p in draft.reward_hacking
        ],
        rubric_evaluation=draft.rubric_evaluation,
        advancement=list(draft.advancement),
        evolution_plan=list(draft.evolution_plan),
        memory_entry=draft.memory_entry,
        analyses=analyses,
        sampled=info.sampled,
        missing_rollouts=list(info.missing),
        expected_rollouts=info.expected,
        missing_parts=info.missing_parts,
        chunks=chunks,
        health=list(info.health),
    )


def empty_summary(info: StepInfo) -> StepSummary:
    text = f"No analysis of step {info.step} arrived before its deadline; nothing can be said about it."
    return StepSummary(
        run_id=info.run_id,
        step=info.step,
        instance_key=info.instance_key,
        executive_summary=text,
        memory_entry=text,
        analyses=0,
        sampled=info.sampled,
        missing_rollouts=list(info.missing),
        expected_rollouts=info.expected,
        missing_parts=info.missing_parts,
        chunks=0,
        health=list(info.health),
    )


def by_instance(analyses: list[RolloutAnalysis], per_instance: bool) -> dict[str | None, list[RolloutAnalysis]]:
    """The step's analyses per instance key (per-instance mode), or all under None."""
    if not per_instance:
        return {None: analyses}
    groups: dict[str | None, list[RolloutAnalysis]] = {}
    for a in analyses:
        groups.setdefault(a.instance_key, []).append(a)
    return groups


def render(summary: StepSummary) -> str:
    """A compact readable text of a step summary, for memory."""
    where = f" (instance {summary.instance_key})" if summary.instance_key else ""
    lines = [f"Step {summary.step}{where} summary of {summary.analyses} analyses: {summary.executive_summary}"]
    lines += [f"Pattern: {p}" for p in summary.systemic_patterns]
    lines += [
        f"Reward hacking, {p.type} in {p.rollouts} rollouts ({p.severity}): {p.description}"
        for p in summary.reward_hacking
    ]
    if summary.rubric_evaluation:
        lines.append(f"Rubrics: {summary.rubric_evaluation}")
    lines += [f"Plan: {p}" for p in summary.evolution_plan]
    if summary.missing_rollouts:
        lines.append(f"Missing analyses: {', '.join(summary.missing_rollouts[:20])}")
    return "\n".join(lines)


def render_chunk(info: StepInfo, index: int, draft: SummaryDraft) -> str:
    patterns = "; ".join(f"{p.type} x{p.rollouts}" for p in draft.reward_hacking) or "none"
    return f"Step {info.step} chunk {index} summary: {draft.executive_summary}\nReward hacking: {patterns}\n{draft.memory_entry}"
