"""The summarizer's worker: step closures and analyses in, one step summary per step out.

Handlers only record what arrived (a StepClosed, an analysis's rollout id) in
Redis, acking in the same script (`effects`), then try the step: nothing is
held in memory, so a summarizer killed at any point loses nothing. A step is
summarized by whoever claims it (a claim is renewed while its summarizer
works, and lapses `claim_ttl_s` after it died; a failed attempt, e.g. an LLM
outage, is retried after `retry_after_s`), and its
summaries are published together with its `summarized` flag, once. `sweep`
looks at every open step: it finishes steps a dead summarizer left claimed,
and summarizes steps whose deadline passed with the analyses that did arrive,
naming the missing rollouts.
"""

import functools
import logging
from typing import Any

import msgspec
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.keys import SUMMARIZERS
from rubricd.messages import EventKind, RolloutAnalysis, StepClosed, StepSummary
from rubricd_services.llm.usage import Metered
from rubricd_services.memory.store import MemoryItem, MemoryKind
from rubricd_services.runtime import events, intake, prompts
from rubricd_services.runtime.gathering import Claim, Claimant, Retries
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.outage import LLM, WEAVIATE
from rubricd_services.runtime.service import Clients
from rubricd_services.state import health

from .effects import Effects, StepState, member, parse_member
from .settings import SummarizerSettings
from .summary import (
    META_SUMMARIZER,
    SUMMARIZER,
    Agent,
    StepInfo,
    Summarized,
    SummaryDraft,
    by_instance,
    render,
    render_chunk,
    summarize_step,
)

SERVICE = "summarizer"
log = logging.getLogger("rubricd.summarizer")


class HealthMetrics:
    """Each rubric's health in the latest summarized step of a run (global sets: per-instance sets would make
    series per prompt); the series of a rubric gone from that step are removed."""

    def __init__(self, metrics: Metrics) -> None:
        self.met_rate = metrics.gauge(
            "rubricd_rubric_met_rate",
            "the share of the training rollouts of the run's latest summarized step that met the rubric",
            ["run_id", "rubric_id"],
        )
        self.uninformative = metrics.gauge(
            "rubricd_rubric_uninformative",
            "1 if the rubric had no spread within any group of the run's latest summarized step, else 0",
            ["run_id", "rubric_id"],
        )
        self._latest: dict[str, tuple[int, set[str]]] = {}  # run -> its latest step seen, the rubrics shown

    def observe(self, summary: StepSummary) -> None:
        latest = self._latest.get(summary.run_id)
        if summary.instance_key is not None or (latest is not None and latest[0] > summary.step):
            return
        shown = {h.rubric_id for h in summary.health}
        for gone in (latest[1] if latest else set()) - shown:
            self.met_rate.remove(summary.run_id, gone)
            self.uninformative.remove(summary.run_id, gone)
        for h in summary.health:
            self.met_rate.labels(summary.run_id, h.rubric_id).set(h.met_rate)
            self.uninformative.labels(summary.run_id, h.rubric_id).set(int(h.uninformative))
        self._latest[summary.run_id] = (summary.step, shown)


class Summarizer:
    """Keeps the step accounting and summarizes steps that are due."""

    def __init__(self, settings: SummarizerSettings, clients: Clients) -> None:
        self.settings = settings
        metrics = clients.metrics
        self.summaries = metrics.counter(
            "rubricd_step_summaries", "step summaries: published, or failed (retried later)", ["outcome"]
        )
        self.open = metrics.gauge("rubricd_open_steps", "steps closed or counting analyses, not yet summarized")
        self.health = HealthMetrics(clients.metrics)
        self.keys = clients.keys
        self.redis = clients.redis
        self.llm = Metered(clients.llm, clients.redis, clients.keys)
        self.memory = clients.memory
        self.outages = clients.outages
        self.events = clients.events
        self.effects = Effects(
            clients.redis,
            self.keys,
            SUMMARIZERS,
            clients.consumer,
            deadline_s=settings.step_deadline_s,
            claim_ttl_s=settings.claim_ttl_s,
            maxlen=settings.stream_maxlen,
            quiet_s=settings.step_quiet_s,
            unclosed_s=settings.unclosed_step_s,
        )
        self.templates = (
            prompts.load(__package__, SUMMARIZER, settings.summarizer_prompt),
            prompts.load(__package__, META_SUMMARIZER, settings.meta_summarizer_prompt),
        )
        self.prompt_chars = settings.agent(SUMMARIZER).prompt_chars(), settings.agent(META_SUMMARIZER).prompt_chars()
        self.steps = Claimant(
            self.effects.steps,
            self.decide,
            Retries(settings.retry_after_s),
            clients.outages,
            describe=lambda name: "summarizing {} step {}".format(*parse_member(name)),
            uses=(LLM, WEAVIATE),
            complete=self.complete,
            failed=self.failed,
        )

    async def on_step_closed(self, msg: RedisStreamMessage) -> None:
        closed = intake.decode(msg.body, StepClosed, "step closure")
        await self.effects.closed(closed, intake.entry_id(msg))
        self.steps.later(member(closed.run_id, closed.step))

    async def on_analysis(self, msg: RedisStreamMessage) -> None:
        analysis = intake.decode(msg.body, RolloutAnalysis, "analysis")
        await self.effects.analyzed(analysis, intake.entry_id(msg), self.settings.rollouts_per_step)
        self.steps.later(member(analysis.run_id, analysis.step))

    async def sweep(self) -> None:
        """Try every open step: finish what crashed summarizers left, and steps whose deadline passed."""
        steps = await self.effects.open_steps()
        self.open.set(len(steps))
        await self.steps.sweep(member(run_id, step) for run_id, step in steps)

    async def stop(self) -> None:
        await self.steps.stop()

    async def complete(self, name: str) -> bool | None:
        """Whether the step is complete before its deadline; None once it was summarized."""
        state = await self.effects.state(*parse_member(name))
        return None if state.summarized else state.complete

    async def decide(self, claim: Claim, give_up: bool) -> None:
        """A claimed step's decision: summarized with what arrived (a step is never given up on)."""
        await self.summarize(await self.effects.state(*parse_member(claim.name)))

    async def failed(self, name: str, error: Exception) -> None:
        """A failed summary is counted and told on the events stream; the step is due again `retry_after_s` later."""
        run_id, step = parse_member(name)
        self.summaries.labels("failed").inc()
        await self.events.publish(
            events.event(SERVICE, EventKind.SUMMARY_FAILED, run_id=run_id, step=step, detail=repr(error)[:500])
        )

    async def summarize(self, state: StepState) -> None:
        """Summarize a claimed step: memory first (idempotent ids), then the summaries and the flag, once."""
        analyses = await self.analyses(state)
        analyzed = {a.rollout_id for a in analyses}
        missing = tuple(sorted(set(state.rollout_ids) - analyzed - state.unsampled.keys()))
        sampled = state.sample(analyzed)
        summaries: list[StepSummary] = []
        items: list[MemoryItem] = []
        groups = by_instance(analyses, self.settings.rubrics_mode == "per_instance")
        for instance_key, group in sorted(groups.items(), key=lambda kv: kv[0] or ""):
            info = StepInfo(
                state.run_id,
                state.step,
                instance_key,
                expected=state.expected,
                missing=missing,
                missing_parts=state.missing_parts,
                sampled=sampled,
                health=tuple(await health.read(self.redis, self.keys, state.run_id, state.step, instance_key)),
            )
            done = await summarize_step(
                info,
                group,
                chunk_size=self.settings.chunk_size,
                templates=self.templates,
                summarizer=self.agent(SUMMARIZER, state.run_id),
                meta_summarizer=self.agent(META_SUMMARIZER, state.run_id),
                prompt_chars=self.prompt_chars,
            )
            summaries.append(done.summary)
            items += memory_items(info, done)
        await self.memory.put(items)
        event = events.event(
            SERVICE,
            EventKind.STEP_SUMMARIZED,
            run_id=state.run_id,
            step=state.step,
            analyses=len(analyses),
            missing=len(missing)
            if state.rollout_ids
            else max(0, (state.expected or 0) - len(analyzed) - len(state.unsampled)),
            **({"sampled": f"{sampled.analyzed}/{sampled.scored} ({sampled.rule})"} if sampled else {}),
            hacking=",".join(sorted({p.type for s in summaries for p in s.reward_hacking})),
            **({"parts": state.parts, "missing_parts": state.missing_parts} if state.parts else {}),
            **({"closers": state.closers} if state.closers else {}),
        )
        if not await self.effects.commit(state.run_id, state.step, summaries, event):
            log.info("%s step %s was summarized by another summarizer meanwhile", state.run_id, state.step)
            return
        self.summaries.labels("published").inc()
        for summary in summaries:
            self.health.observe(summary)
        await self.forget(state.run_id, state.step)

    async def forget(self, run_id: str, step: int) -> None:
        """Retention (`memory_keep_steps`), after `step`'s summary: the run's memories of each kind named older
        than its last N steps, but none of a step still open. A failure is logged (the summary stands): the next
        step's deletes them."""
        if not (keep := self.settings.memory_keep_steps):
            return
        try:
            open_steps = [s for r, s in await self.effects.open_steps() if r == run_id and s != step]
            before = {kind: min([step - steps + 1, *open_steps]) for kind, steps in keep.items()}
            forgotten = {kind: await self.memory.forget(run_id, MemoryKind(kind), b) for kind, b in before.items()}
            if any(forgotten.values()):
                detail = ", ".join(f"{n} {kind} (before step {before[kind]})" for kind, n in forgotten.items() if n)
                event = events.event(
                    SERVICE, EventKind.MEMORY_FORGOTTEN, run_id=run_id, step=step, detail=detail, **forgotten
                )
                await self.events.publish(event)
        except Exception:
            log.exception(
                "retention: %s's memories before step %s not deleted; the next step tries again", run_id, step
            )

    async def analyses(self, state: StepState) -> list[RolloutAnalysis]:
        """The step's analyses from memory, one per rollout."""
        items = await self.memory.recent(
            state.run_id, MemoryKind.ANALYSIS, limit=self.settings.max_analyses, step=state.step
        )
        found: dict[str, RolloutAnalysis] = {}
        for item in items:
            if item.message:
                analysis = wire.decode(item.message, RolloutAnalysis)
                found[analysis.rollout_id] = analysis
        return list(found.values())

    def agent(self, name: str, run_id: str) -> Agent:
        return functools.partial(self.llm.structured, run_id, name, type_=SummaryDraft)


def memory_items(info: StepInfo, done: Summarized) -> list[MemoryItem]:
    """The chunk summaries (ref = chunk index) and the step summary, as memories."""
    where: dict[str, Any] = {"run_id": info.run_id, "step": info.step, "instance_key": info.instance_key}
    items = [
        MemoryItem(
            kind=MemoryKind.CHUNK_SUMMARY,
            ref=str(i),
            text=render_chunk(info, i, draft),
            message=msgspec.json.encode(draft),
            **where,
        )
        for i, draft in enumerate(done.chunks)
    ]
    summary = done.summary
    items.append(MemoryItem(kind=MemoryKind.STEP_SUMMARY, text=render(summary), message=wire.encode(summary), **where))
    return items
