"""The updater's memory: what it reads (static and dynamic memory) and the record of an update it writes."""

import time
from collections.abc import Sequence
from typing import Annotated

import msgspec

from rubricd import wire
from rubricd.messages import Action, Candidate, RubricsUpdated, StepSummary
from rubricd_services.llm.usage import Ask
from rubricd_services.memory.store import Hit, Memory, MemoryItem, MemoryKind
from rubricd_services.runtime import prompts

from .prompting import QUERY_WRITER, MemoryBudget, query_writer_messages
from .proposal import Rejection

SEARCHED_KINDS = [MemoryKind.ANALYSIS, MemoryKind.STEP_SUMMARY, MemoryKind.CHUNK_SUMMARY, MemoryKind.RUBRIC_UPDATE]


class MemoryQueries(msgspec.Struct, frozen=True, kw_only=True):
    """The query writer's answer: searches of the run's memory, one issue each."""

    queries: Annotated[list[Annotated[str, prompts.max_chars(100)]], prompts.max_items(8)]


async def static_memory(
    memory: Memory, summary: StepSummary, instance_key: str | None, budget: MemoryBudget
) -> list[MemoryItem] | None:
    """The run's last K step summaries before this step (None when switched off)."""
    if not budget.static:
        return None
    items = await memory.recent(
        summary.run_id,
        MemoryKind.STEP_SUMMARY,
        limit=budget.static_k,
        instance_key=instance_key,
        before_step=summary.step,
    )
    return list(items)


async def dynamic_memory(
    memory: Memory, summary: StepSummary, ask: Ask, template: str, budget: MemoryBudget
) -> tuple[list[str], list[Hit] | None, float]:
    """(queries, deduplicated hits, seconds spent searching) from the query writer's searches (None when switched
    off); the seconds leave out the query writer's call."""
    if not budget.dynamic:
        return [], None, 0.0
    written = await ask(summary.run_id, QUERY_WRITER, query_writer_messages(template, summary, budget), MemoryQueries)
    queries = list(dict.fromkeys(q.strip() for q in written.queries if q.strip()))[: budget.max_queries]
    hits: dict[str, Hit] = {}
    started = time.monotonic()
    for query in queries:
        for hit in await memory.search(summary.run_id, query, limit=budget.results_per_query, kinds=SEARCHED_KINDS):
            if hit.id not in hits or hit.score > hits[hit.id].score:
                hits[hit.id] = hit
    return queries, sorted(hits.values(), key=lambda h: -h.score), time.monotonic() - started


def memory_item(update: RubricsUpdated, text: str) -> MemoryItem:
    """The update as a memory (kind rubric_update, ref = its version)."""
    return MemoryItem(
        kind=MemoryKind.RUBRIC_UPDATE,
        run_id=update.run_id,
        step=update.step or 0,
        ref=str(update.version),
        instance_key=update.instance_key,
        text=text,
        message=wire.encode(update),
    )


def rejection_item(candidate: Candidate) -> MemoryItem:
    """What the gate failed of a decided candidate, as a memory the updater's next searches find (kind
    rubric_update, ref `c<step>`: it made no version)."""
    assert candidate.decision is not None
    decision = candidate.decision
    lines = [
        f"Candidate rubric change proposed after step {candidate.step}, judged in shadow to step {decision.step} "
        f"({decision.shadow_scores} rollouts): {decision.outcome}. {decision.reason}".rstrip()
    ]
    for check in decision.checks:
        if not check.passed:
            lines.append(f"- {check.action} {check.rubric_id} failed the gate: {'; '.join(check.reasons)}")
    return MemoryItem(
        kind=MemoryKind.RUBRIC_UPDATE,
        run_id=candidate.run_id,
        step=decision.step,
        ref=f"c{candidate.step}",
        instance_key=candidate.instance_key,
        text="\n".join(lines),
        message=wire.encode(candidate),
    )


def describe(
    update: RubricsUpdated, rationale: str, consulted: Sequence[str] = (), rejected: Sequence[Rejection] = ()
) -> str:
    """The update as readable text (memory entry, logs)."""
    lines = [
        f"Rubric update to version {update.version} (from {update.previous_version}) after step {update.step}, "
        f"strategy {update.strategy}: {rationale}"
    ]
    for m in update.modifications:
        if m.action is Action.ADD and m.rubric:
            per_turn = ", judged on each turn" if m.rubric.scope == "turn" else ""
            what = f"added {m.rubric.id} ({m.rubric.points:+g}, {m.rubric.meta_class}{per_turn}): {m.rubric.criterion}"
        elif m.action is Action.MODIFY and m.rubric:
            what = f"modified {m.rubric_id}: {m.rubric.criterion} ({m.rubric.points:+g})"
        elif m.action is Action.REWEIGHT:
            what = f"reweighted {m.rubric_id} to {m.points:+g}"
        else:
            what = f"removed {m.rubric_id}"
        lines.append(f"- {what}. Why: {m.rationale}")
    if rejected:
        lines.append("Dropped: " + "; ".join(f"{r.action} {r.rubric_id}: {r.reason}" for r in rejected))
    if consulted:
        lines.append("Memories consulted: " + ", ".join(consulted))
    return "\n".join(lines)
