"""The updater service: step summaries in, new rubric set versions out.

Wiring only: settings, the broker and its subscribers, and the clients made in
the lifespan. The work is in `update` (memory, proposal, validation, the new
version); `UpdaterService.handle` adds what delivery needs around it.

Two subscribers share the summaries stream's consumer group:
- `on_summary` reads new entries, one at a time (updates of one run must not
  overtake each other);
- `on_reclaimed` takes over entries a dead updater left pending (XAUTOCLAIM
  after `reclaim_idle_ms`), and dead-letters those delivered too often.

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

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TypeVar

import msgspec
from faststream import Context, FastStream
from faststream.middlewares import AckPolicy
from faststream.redis import StreamSub
from faststream.redis.annotations import RedisStreamMessage
from redis.asyncio import Redis
from redis.exceptions import LockError

from common import service, streams
from common.embedder import EMBEDDER_AGENT, make_embedder
from common.llm import LLMError, LLMGateway
from common.memory import Memory
from common.metrics import Metrics
from common.seeds import Seeds
from rubricd import wire
from rubricd.keys import UPDATERS, Keys
from rubricd.messages import Event, StepSummary
from rubricd.store import RubricStore

from .settings import UpdaterSettings
from .update import QUERY_WRITER, UPDATER, Limits, MemoryBudget, Outcome, Prompts, Updater

SERVICE = "updater"
log = logging.getLogger("rubricd.updater")
T = TypeVar("T")


class UpdaterService:
    """Turns one summaries entry into its effects: at most one new version, an announcement, the step marker."""

    def __init__(self, settings: UpdaterSettings, redis: Redis, gateway: LLMGateway, memory: Memory, metrics: Metrics) -> None:
        self.settings = settings
        self.outcomes = metrics.counter("rubricd_step_updates", "step summaries handled, by outcome (the updater's event kind)", ["outcome"])
        self.rubric_version = metrics.gauge("rubricd_rubric_version", "the run's current rubric version (global sets)", ["run_id"])
        self.keys = Keys(settings.namespace)
        self.redis = redis
        self.gateway = gateway
        self.store = RubricStore(redis, self.keys)
        self.updater = Updater(
            store=self.store,
            memory=memory,
            ask=self.ask,
            prompts=Prompts.load(settings.query_writer_prompt, settings.updater_prompt),
            seeds=Seeds.load(settings),
            limits=Limits(settings.min_points, settings.max_points, settings.max_adaptive),
            budget=MemoryBudget(
                static=settings.static_memory, dynamic=settings.dynamic_memory, static_k=settings.static_k,
                max_queries=settings.max_queries, adaptive_queries=settings.adaptive_queries,
                results_per_query=settings.results_per_query,
            ),  # fmt: skip
        )

    async def handle(self, msg: RedisStreamMessage, consumer: str) -> None:
        entry_id = msg.raw_message["message_ids"][0]
        try:
            summary = wire.decode(msg.body, StepSummary)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            await streams.dead_letter(self.redis, self.keys, msg, service=SERVICE, reason=f"malformed step summary: {e}", maxlen=self.settings.stream_maxlen)
            return
        try:
            async with self.keep_claimed(entry_id, consumer):
                events, announcement = await self.process(summary)
            await self.commit(entry_id, summary, events, announcement)
        except Exception as e:
            # Left pending: a reclaiming updater retries it, then dead-letters it.
            await self.redis.set(self.keys.failure(self.keys.summaries, entry_id.decode()), repr(e), ex=86_400)
            raise
        for event in events:
            self.outcomes.labels(event.kind).inc()
            if "version" in event.fields and event.fields.get("instance_key") is None:
                self.rubric_version.labels(summary.run_id).set(event.fields["version"])  # type: ignore[arg-type]

    async def process(self, summary: StepSummary) -> tuple[list[Event], bytes | None]:
        """The events to log and the RubricsUpdated to announce (if any) for one summary."""
        instance = summary.instance_key if self.settings.rubrics_mode == "per_instance" else None
        if summary.step % self.settings.update_frequency:
            detail = f"update_frequency={self.settings.update_frequency}: rubrics are updated after steps 0, N, 2N, ..."
            return [self.event("update_skipped", summary, detail=detail)], None
        try:
            async with self.lock(summary.run_id, instance):
                outcome = await self.updater.update(summary, instance)
        except LLMError as e:
            log.warning("run %s step %d: no update, the LLM failed: %s", summary.run_id, summary.step, e)
            return [self.event("update_failed", summary, detail=str(e))], None
        return [self.outcome_event(summary, outcome)], wire.encode(outcome.update) if outcome.update else None

    @contextlib.asynccontextmanager
    async def keep_claimed(self, entry_id: bytes, consumer: str) -> AsyncIterator[None]:
        """Keep a live update's entry from looking idle: an update can outlast `reclaim_idle_ms`
        (a slow model, a wait for the run's lock), and a reclaimer must only take entries of dead updaters.
        XCLAIM ... JUSTID resets the idle time without counting a delivery."""

        async def beat() -> None:
            while True:
                await asyncio.sleep(self.settings.reclaim_idle_ms / 3000)
                try:
                    await self.redis.xclaim(self.keys.summaries, UPDATERS, consumer, 0, [entry_id], justid=True)
                except Exception:
                    log.exception("could not keep summary entry %s claimed", entry_id)

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str, instance: str | None) -> AsyncIterator[None]:
        """Hold the run's update lock; it expires on its own if its holder dies."""
        # thread_local=False: the token is this coroutine's own, not shared by every handler on the thread.
        lock = self.redis.lock(self.keys.update_lock(run_id, instance), timeout=self.settings.lock_timeout_s,
                               blocking_timeout=self.settings.lock_timeout_s + 5, thread_local=False)  # fmt: skip
        if not await lock.acquire():
            raise LockError(f"update lock of {run_id}/{instance} not free after {self.settings.lock_timeout_s + 5:g} s")
        try:
            yield
        finally:
            try:
                await lock.release()
            except LockError:  # it expired meanwhile: the store's compare-and-set still kept the update safe
                log.warning("the update lock of %s/%s expired before the update ended", run_id, instance)

    async def commit(self, entry_id: bytes, summary: StepSummary, events: list[Event], announcement: bytes | None) -> None:
        """Advance the step marker, then announce, log and ack in one MULTI."""
        await self.store.advance_step(summary.run_id, summary.step)
        maxlen = self.settings.stream_maxlen
        async with self.redis.pipeline(transaction=True) as pipe:
            if announcement is not None:
                pipe.xadd(self.keys.rubrics_updated, {wire.FIELD: announcement}, maxlen=maxlen, approximate=True)
            for event in events:
                pipe.xadd(self.keys.events, wire.entry(event), maxlen=maxlen, approximate=True)
            pipe.xack(self.keys.summaries, UPDATERS, entry_id)
            await pipe.execute()

    async def give_up(self, msg: RedisStreamMessage, deliveries: int) -> None:
        """Dead-letter a summary that keeps failing, and still advance its step so no trainer waits forever."""
        entry_id = msg.raw_message["message_ids"][0].decode()
        last_error = await self.redis.get(self.keys.failure(self.keys.summaries, entry_id))
        reason = f"failed {deliveries} deliveries (max_deliveries={self.settings.max_deliveries})"
        if last_error:
            reason += f"; last error: {last_error.decode()}"
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            summary = wire.decode(msg.body, StepSummary)
            await self.store.advance_step(summary.run_id, summary.step)
        await streams.dead_letter(self.redis, self.keys, msg, service=SERVICE, reason=reason, deliveries=deliveries, maxlen=self.settings.stream_maxlen)

    async def ask(self, agent: str, messages: list[dict[str, str]], type_: type[T]) -> T:
        return (await self.gateway.structured(agent, messages, type_)).value

    def outcome_event(self, summary: StepSummary, outcome: Outcome) -> Event:
        for r in outcome.rejected:
            log.warning("run %s step %d: dropped %s %s: %s", summary.run_id, summary.step, r.action, r.rubric_id, r.reason)
        fields: dict[str, object] = {"version": outcome.current.version, "instance_key": outcome.current.instance_key}
        if outcome.update is not None:
            fields |= {"previous_version": outcome.update.previous_version, "strategy": str(outcome.update.strategy),
                       "modifications": len(outcome.update.modifications)}  # fmt: skip
        if outcome.proposal is not None:
            fields |= {"strategy": str(outcome.proposal.strategy), "queries": len(outcome.queries),
                       "consulted": ",".join(outcome.consulted), "rejected": len(outcome.rejected)}  # fmt: skip
        detail = outcome.proposal.rationale if outcome.proposal else ""
        if outcome.rejected:
            detail += " | dropped: " + "; ".join(f"{r.action} {r.rubric_id}: {r.reason}" for r in outcome.rejected)
        kind = {"updated": "rubrics_updated", "unchanged": "rubrics_unchanged", "already_applied": "rubrics_reannounced"}[outcome.kind]
        return self.event(kind, summary, detail=detail, **fields)

    @staticmethod
    def event(kind: str, summary: StepSummary, **fields: object) -> Event:
        return streams.event(SERVICE, kind, run_id=summary.run_id, step=summary.step, **fields)


def create_app(settings: UpdaterSettings, metrics: Metrics | None = None) -> FastStream:
    keys = Keys(settings.namespace)
    consumer = service.consumer_name(settings)
    metrics = metrics or Metrics(SERVICE)
    broker = service.make_broker(settings, metrics)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        redis = service.make_redis(settings)
        gateway = LLMGateway.from_settings(settings, [QUERY_WRITER, UPDATER, EMBEDDER_AGENT])
        metrics.watch_gateway(gateway)
        memory = await Memory.connect(settings, make_embedder(settings, gateway))
        await streams.ensure_group(redis, keys.summaries, UPDATERS)
        broker.context.set_global("updater", UpdaterService(settings, redis, gateway, memory, metrics))
        backlog = asyncio.create_task(metrics.watch_groups(redis, [(keys.summaries, UPDATERS)]))
        try:
            yield
        finally:
            backlog.cancel()
            await memory.close()
            await gateway.aclose()
            await redis.aclose()

    @broker.subscriber(
        stream=StreamSub(keys.summaries, group=UPDATERS, consumer=consumer, max_records=1),
        ack_policy=AckPolicy.MANUAL,
    )
    async def on_summary(msg: RedisStreamMessage, updater: UpdaterService = Context("updater")) -> None:
        await updater.handle(msg, consumer)

    @broker.subscriber(
        stream=StreamSub(keys.summaries, group=UPDATERS, consumer=f"{consumer}-reclaim", min_idle_time=settings.reclaim_idle_ms),
        ack_policy=AckPolicy.MANUAL,
    )
    async def on_reclaimed(msg: RedisStreamMessage, updater: UpdaterService = Context("updater")) -> None:
        deliveries = await msg.get_delivery_count()
        if deliveries > settings.max_deliveries:
            await updater.give_up(msg, deliveries)
        else:
            await updater.handle(msg, f"{consumer}-reclaim")

    async def announce() -> None:
        updater: UpdaterService = broker.context.get("updater")
        await service.announce_started(updater.redis, keys, SERVICE, settings.stream_maxlen, consumer=consumer,
                                       update_frequency=settings.update_frequency, static_memory=settings.static_memory,
                                       dynamic_memory=settings.dynamic_memory)  # fmt: skip

    return FastStream(broker, lifespan=lifespan, after_startup=[announce])


def main() -> None:
    service.run(SERVICE, UpdaterSettings, create_app)
