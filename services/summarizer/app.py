"""The summarizer service: step closures and rollout analyses in, one step summary per step out.

Wiring only: settings, the broker and its subscribers, the clients made in the
lifespan, and the sweeper. The accounting is in `steps`, the summarizing in
`summary`.

Handlers only record what arrived (a StepClosed, an analysis's rollout id) in
Redis, acking in the same script, then try the step: nothing is held in
memory, so a summarizer killed at any point loses nothing. A step is
summarized by whoever claims it (a claim lapses after `claim_ttl_s`; a failed
attempt, e.g. an LLM outage, is retried after `retry_after_s`), and its
summaries are published together with its `summarized` flag, once. The
sweeper looks at every open step each `sweep_interval_s`: it finishes steps a
dead summarizer left claimed, and summarizes steps whose deadline passed with
the analyses that did arrive, naming the missing rollouts.
"""

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator

import msgspec
from faststream import Context, FastStream
from faststream.middlewares import AckPolicy
from faststream.redis import StreamSub
from faststream.redis.annotations import RedisStreamMessage
from redis.asyncio import Redis

from common import service, streams
from common.embedder import make_embedder
from common.llm import LLMGateway
from common.memory import Memory, MemoryItem, MemoryKind
from common.metrics import Metrics
from rubricd import wire
from rubricd.keys import SUMMARIZERS, Keys
from rubricd.messages import RolloutAnalysis, StepClosed, StepSummary

from .settings import SummarizerSettings
from .steps import StepBook, StepState
from .summary import StepInfo, Summarized, SummaryDraft, by_instance, load_template, render, render_chunk, summarize_step

SERVICE = "summarizer"
log = logging.getLogger("rubricd.summarizer")


class Summarizer:
    """Keeps the step accounting and summarizes steps that are due."""

    def __init__(self, settings: SummarizerSettings, redis: Redis, gateway: LLMGateway, memory: Memory, metrics: Metrics) -> None:
        self.settings = settings
        self.summaries = metrics.counter("rubricd_step_summaries", "step summaries: published, or failed (retried later)", ["outcome"])
        self.open = metrics.gauge("rubricd_open_steps", "steps closed or counting analyses, not yet summarized")
        self.keys = Keys(settings.namespace)
        self.redis = redis
        self.gateway = gateway
        self.memory = memory
        self.book = StepBook(redis, self.keys, SUMMARIZERS, deadline_s=settings.step_deadline_s,
                             claim_ttl_s=settings.claim_ttl_s, maxlen=settings.stream_maxlen)  # fmt: skip
        self.templates = (
            load_template(settings.summarizer_prompt, "summarizer.md"),
            load_template(settings.meta_summarizer_prompt, "meta_summarizer.md"),
        )
        self._running: dict[tuple[str, int], asyncio.Task[None]] = {}

    async def on_step_closed(self, msg: RedisStreamMessage) -> None:
        closed = wire.decode(msg.body, StepClosed)
        await self.book.closed(closed, time.time(), msg.raw_message["message_ids"][0])
        self.try_later(closed.run_id, closed.step)

    async def on_analysis(self, msg: RedisStreamMessage) -> None:
        analysis = wire.decode(msg.body, RolloutAnalysis)
        await self.book.analysed(analysis, time.time(), msg.raw_message["message_ids"][0], self.settings.rollouts_per_step)
        self.try_later(analysis.run_id, analysis.step)

    def try_later(self, run_id: str, step: int) -> None:
        """Summarize the step in the background if it is due (one task per step in this process)."""
        key = (run_id, step)
        if key not in self._running:
            task = asyncio.create_task(self.try_step(run_id, step))
            self._running[key] = task
            task.add_done_callback(lambda _: self._running.pop(key, None))

    async def sweep(self) -> None:
        steps = await self.book.open_steps()
        self.open.set(len(steps))
        for run_id, step in steps:
            self.try_later(run_id, step)

    async def try_step(self, run_id: str, step: int) -> None:
        token = uuid.uuid4().hex
        try:
            state = await self.book.state(run_id, step)
            now = time.time()
            if not state.due(now) or not await self.book.claim(run_id, step, token, now):
                return
            await self.summarize(await self.book.state(run_id, step))
        except Exception as e:
            # Our claim now ends at the retry time; the sweeper then tries again.
            log.exception("summarizing %s step %s failed", run_id, step)
            self.summaries.labels("failed").inc()
            with contextlib.suppress(Exception):
                await self.book.retry_at(run_id, step, token, time.time() + self.settings.retry_after_s)
                failed = streams.event(SERVICE, "summary_failed", run_id=run_id, step=step, detail=repr(e)[:500])
                await self.redis.xadd(self.keys.events, wire.entry(failed), maxlen=self.settings.stream_maxlen, approximate=True)

    async def summarize(self, state: StepState) -> None:
        """Summarize a claimed step: memory first (idempotent ids), then the summaries and the flag, once."""
        analyses = await self.analyses(state)
        got = {a.rollout_id for a in analyses}
        missing = tuple(sorted(set(state.rollout_ids) - got))
        summaries: list[StepSummary] = []
        items: list[MemoryItem] = []
        for instance, group in sorted(by_instance(analyses, self.settings.rubrics_mode == "per_instance").items(), key=lambda kv: kv[0] or ""):
            info = StepInfo(run_id=state.run_id, step=state.step, instance_key=instance, expected=state.expected, missing=missing)
            done = await summarize_step(info, group, chunk_size=self.settings.chunk_size, templates=self.templates,
                                        summarizer=self.agent("summarizer"), meta_summarizer=self.agent("meta_summarizer"))  # fmt: skip
            summaries.append(done.summary)
            items += memory_items(info, done)
        await self.memory.put(items)
        event = streams.event(
            SERVICE, "step_summarized", run_id=state.run_id, step=state.step, analyses=len(analyses),
            missing=len(missing) if state.rollout_ids else max(0, (state.expected or 0) - len(analyses)),
            hacking=",".join(sorted({p.type for s in summaries for p in s.reward_hacking})),
        )  # fmt: skip
        if not await self.book.commit(state.run_id, state.step, summaries, event, time.time()):
            log.info("%s step %s was summarized by another summarizer meanwhile", state.run_id, state.step)
            return
        self.summaries.labels("published").inc()

    async def analyses(self, state: StepState) -> list[RolloutAnalysis]:
        """The step's analyses from memory, one per rollout (memory filters by step below; this by equality)."""
        items = await self.memory.recent(state.run_id, MemoryKind.ANALYSIS, limit=self.settings.max_analyses,
                                         before_step=state.step + 1)  # fmt: skip
        found: dict[str, RolloutAnalysis] = {}
        for item in items:
            if item.step == state.step and item.message:
                analysis = wire.decode(item.message, RolloutAnalysis)
                found[analysis.rollout_id] = analysis
        return list(found.values())

    def agent(self, name: str):  # noqa: ANN201
        async def call(messages: list[dict[str, str]]) -> SummaryDraft:
            return (await self.gateway.structured(name, messages, SummaryDraft)).value

        return call

    async def give_up(self, msg: RedisStreamMessage, deliveries: int) -> None:
        reason = f"failed {deliveries} deliveries (max_deliveries={self.settings.max_deliveries})"
        await streams.dead_letter(self.redis, self.keys, msg, service=SERVICE, reason=reason, deliveries=deliveries)


def memory_items(info: StepInfo, done: Summarized) -> list[MemoryItem]:
    """The chunk summaries (ref = chunk index) and the step summary, as memories."""
    common = dict(run_id=info.run_id, step=info.step, instance_key=info.instance_key)
    items = [
        MemoryItem(kind=MemoryKind.CHUNK_SUMMARY, ref=str(i), text=render_chunk(info, i, draft), message=msgspec.json.encode(draft), **common)
        for i, draft in enumerate(done.chunks)
    ]
    items.append(MemoryItem(kind=MemoryKind.STEP_SUMMARY, text=render(done.summary), message=wire.encode(done.summary), **common))
    return items


async def handle(msg: RedisStreamMessage, summarizer: Summarizer, on: str) -> None:
    """Decode and record one entry; a malformed one goes to the dead letters at once."""
    try:
        await getattr(summarizer, on)(msg)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        await streams.dead_letter(summarizer.redis, summarizer.keys, msg, service=SERVICE, reason=f"malformed message: {e}")


def create_app(settings: SummarizerSettings, metrics: Metrics | None = None) -> FastStream:
    keys = Keys(settings.namespace)
    consumer = service.consumer_name(settings)
    metrics = metrics or Metrics(SERVICE)
    broker = service.make_broker(settings, metrics)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        redis = service.make_redis(settings)
        gateway = LLMGateway.from_settings(settings, ["summarizer", "meta_summarizer", "embedder"])
        metrics.watch_gateway(gateway)
        memory = await Memory.connect(settings, make_embedder(settings, gateway))
        for stream in (keys.steps, keys.analyses):
            await streams.ensure_group(redis, stream, SUMMARIZERS)
        summarizer = Summarizer(settings, redis, gateway, memory, metrics)
        broker.context.set_global("summarizer", summarizer)
        chores = [asyncio.create_task(sweep_forever(summarizer, settings.sweep_interval_s)),
                  asyncio.create_task(metrics.watch_groups(redis, [(keys.steps, SUMMARIZERS), (keys.analyses, SUMMARIZERS)]))]  # fmt: skip
        try:
            yield
        finally:
            for chore in chores:
                chore.cancel()
            for task in list(summarizer._running.values()):
                task.cancel()
            await memory.close()
            await gateway.aclose()
            await redis.aclose()

    def subscribe(stream: str, on: str) -> None:
        @broker.subscriber(
            stream=StreamSub(stream, group=SUMMARIZERS, consumer=consumer, max_records=settings.max_records),
            max_workers=settings.max_in_flight,
            ack_policy=AckPolicy.MANUAL,
        )
        async def fresh(msg: RedisStreamMessage, summarizer: Summarizer = Context("summarizer")) -> None:
            await handle(msg, summarizer, on)

        @broker.subscriber(
            stream=StreamSub(stream, group=SUMMARIZERS, consumer=f"{consumer}-reclaim", min_idle_time=settings.reclaim_idle_ms),
            ack_policy=AckPolicy.MANUAL,
        )
        async def reclaimed(msg: RedisStreamMessage, summarizer: Summarizer = Context("summarizer")) -> None:
            deliveries = await msg.get_delivery_count()
            if deliveries > settings.max_deliveries:
                await summarizer.give_up(msg, deliveries)
            else:
                await handle(msg, summarizer, on)

    subscribe(keys.steps, "on_step_closed")
    subscribe(keys.analyses, "on_analysis")

    async def announce() -> None:
        summarizer: Summarizer = broker.context.get("summarizer")
        await service.announce_started(summarizer.redis, keys, SERVICE, settings.stream_maxlen, consumer=consumer)

    return FastStream(broker, lifespan=lifespan, after_startup=[announce])


async def sweep_forever(summarizer: Summarizer, interval_s: float) -> None:
    """Finish what crashed summarizers left, and steps whose deadline passed."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await summarizer.sweep()
        except Exception:
            log.exception("sweeping open steps failed")


def main() -> None:
    service.run(SERVICE, SummarizerSettings, create_app)
