"""The updater's worker: one step summary in, at most one new rubric set version, announced.

Updates of one run (and instance) are serialized across processes by a Redis
lock, and the store's compare-and-set makes a racing writer fail instead of
overwriting. A summary redelivered after a crash finds the version its step
already produced and only re-announces it: every step makes at most one
version. After every summary, updated or not, the run's step marker advances:
a trainer in synchronous mode waits on it (`RubricdClient.wait_for_rubrics`).
An LLM that fails after its retries leaves the rubrics as they are (event
`update_failed`) rather than holding that trainer up; a summary that fails
otherwise is retried by reclaim, then dead-lettered (and its step advanced).
"""

import contextlib
import logging

import msgspec
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.keys import UPDATERS
from rubricd.messages import Candidate, Event, EventKind, RubricsUpdated, StepSummary
from rubricd_services.llm import LLMError
from rubricd_services.llm.usage import Metered
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.runtime import events, intake
from rubricd_services.runtime.service import Clients
from rubricd_services.state import promotion
from rubricd_services.state.promotion import Candidates

from .effects import Effects
from .prompting import UPDATER, MemoryBudget, Prompts
from .proposal import Limits
from .settings import UpdaterSettings
from .update import Outcome, RubricUpdater

SERVICE = "updater"
log = logging.getLogger("rubricd.updater")


class Updater:
    """Turns one summaries entry into its effects: at most one new version, an announcement, the step marker."""

    def __init__(self, settings: UpdaterSettings, clients: Clients) -> None:
        self.settings = settings
        self.promotion = settings.promotion_plan()  # a run's promotion unless it sets its own
        metrics = clients.metrics
        self.outcomes = metrics.counter(
            "rubricd_step_updates", "step summaries handled, by outcome (the updater's event kind)", ["outcome"]
        )
        self.current_rubric_version = metrics.gauge(
            "rubricd_current_rubric_version", "the run's current rubric version (global sets)", ["run_id"]
        )
        self.retrieval = metrics.histogram(
            "rubricd_memory_retrieval_seconds",
            "the memory reads of one update's prompt (recent step summaries and the searches), not the LLM's calls",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.effects = Effects(
            clients.redis, clients.keys, UPDATERS, maxlen=settings.stream_maxlen, update_lock_s=settings.update_lock_s
        )
        self.updater = RubricUpdater(
            store=self.effects.store,
            candidates=Candidates(clients.redis, clients.keys),
            memory=clients.memory,
            ask=Metered(clients.llm, clients.redis, clients.keys).structured,
            prompts=Prompts.load(settings.query_writer_prompt, settings.updater_prompt),
            seeds=Seeds.load(settings),
            limits=Limits(
                min_points=settings.min_points,
                max_points=settings.max_points,
                meta_classes=tuple(settings.meta_classes),
                max_adaptive=settings.max_adaptive,
            ),
            prompt_chars=settings.agent(UPDATER).prompt_chars(),
            budget=MemoryBudget(
                static=settings.static_memory,
                dynamic=settings.dynamic_memory,
                static_k=settings.static_k,
                max_queries=settings.max_queries,
                adaptive_queries=settings.adaptive_queries,
                results_per_query=settings.results_per_query,
            ),
        )

    async def handle(self, msg: RedisStreamMessage) -> None:
        summary = intake.decode(msg.body, StepSummary, "step summary")
        entry_id = intake.entry_id(msg)
        logged, announcement = await self.process(summary)
        await self.effects.commit(entry_id, summary.run_id, summary.step, logged, announcement)
        for event in logged:
            self.outcomes.labels(event.kind).inc()
            version = event.fields.get("version")
            if isinstance(version, int) and event.fields.get("instance_key") is None:
                self.current_rubric_version.labels(summary.run_id).set(version)

    async def process(self, summary: StepSummary) -> tuple[list[Event], RubricsUpdated | Candidate | None]:
        """The events to log and what to announce (if any) for one summary: a new version, or a candidate proposed or
        rejected (the scorers reload the run's set on either)."""
        instance_key = summary.instance_key if self.settings.rubrics_mode == "per_instance" else None
        if summary.step % self.settings.update_frequency:
            detail = f"update_frequency={self.settings.update_frequency}: rubrics are updated after steps 0, N, 2N, ..."
            return [self.event(EventKind.UPDATE_SKIPPED, summary, detail=detail)], None
        plan = await promotion.plan(self.effects.redis, self.effects.keys, summary.run_id, self.promotion)
        try:
            async with self.effects.lock(summary.run_id, instance_key):
                outcome = await self.updater.update(summary, instance_key, plan)
        except LLMError as e:
            log.warning("run %s step %d: no update, the LLM failed: %s", summary.run_id, summary.step, e)
            return [self.event(EventKind.UPDATE_FAILED, summary, detail=str(e))], None
        if outcome.proposal is not None:
            self.retrieval.observe(outcome.retrieval_s)
        return [self.outcome_event(summary, outcome)], announced(outcome)

    async def given_up(self, msg: RedisStreamMessage) -> None:
        """A summary that keeps failing is dead-lettered; its step still advances so no trainer waits forever."""
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            summary = wire.decode(msg.body, StepSummary)
            await self.effects.store.advance_step(summary.run_id, summary.step)

    def outcome_event(self, summary: StepSummary, outcome: Outcome) -> Event:
        for r in outcome.rejected:
            log.warning(
                "run %s step %d: dropped %s %s: %s", summary.run_id, summary.step, r.action, r.rubric_id, r.reason
            )
        fields: dict[str, object] = {"version": outcome.current.version, "instance_key": outcome.current.instance_key}
        if outcome.update is not None:
            update = outcome.update
            fields |= {
                "previous_version": update.previous_version,
                "strategy": str(update.strategy),
                "modifications": len(update.modifications),
            }
        if outcome.proposal is not None:
            fields |= {
                "strategy": str(outcome.proposal.strategy),
                "queries": len(outcome.queries),
                "consulted": ",".join(outcome.consulted),
                "rejected": len(outcome.rejected),
                "retrieval_ms": round(outcome.retrieval_s * 1000, 1),
            }
        if (candidate := outcome.candidate) is not None:
            fields |= candidate_fields(candidate)
        detail = outcome.proposal.rationale if outcome.proposal else ""
        if candidate is not None and candidate.decision is not None:
            detail = "; ".join(
                [candidate.decision.reason]
                + [f"{c.action} {c.rubric_id}: {', '.join(c.reasons)}" for c in candidate.decision.checks if c.reasons]
            ).strip("; ")
        if outcome.rejected:
            detail += " | dropped: " + "; ".join(f"{r.action} {r.rubric_id}: {r.reason}" for r in outcome.rejected)
        return self.event(outcome.kind, summary, detail=detail, **fields)

    @staticmethod
    def event(kind: EventKind, summary: StepSummary, **fields: object) -> Event:
        return events.event(SERVICE, kind, run_id=summary.run_id, step=summary.step, **fields)


def candidate_fields(candidate: Candidate) -> dict[str, object]:
    """A candidate's event fields: which, until when, and the gate's figures once decided."""
    fields: dict[str, object] = {
        "candidate_step": candidate.step,
        "shadow_until": candidate.until,
        "candidate_version": candidate.rubrics.version,
        "modifications": len(candidate.modifications),
    }
    if (decision := candidate.decision) is not None:
        fields |= {
            "passed": sum(c.passed for c in decision.checks),
            "failed": sum(not c.passed for c in decision.checks),
            "shadow_scores": decision.shadow_scores,
            "flagged_delta": decision.flagged_delta,
            "honest_delta": decision.honest_delta,
        }
        if (canaries := decision.canaries) is not None:
            fields |= {
                "canary_agreement": canaries.agreement,
                "canary_agreement_with_candidate": canaries.with_candidate,
            }
    return fields


def announced(outcome: Outcome) -> RubricsUpdated | Candidate | None:
    """What an outcome announces: its new version, or its candidate when proposed or rejected."""
    if outcome.update is not None:
        return outcome.update
    if outcome.kind in (EventKind.RUBRICS_PROPOSED, EventKind.RUBRICS_REJECTED):
        return outcome.candidate
    return None
