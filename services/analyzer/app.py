"""The analyzer service: scored rollouts in, rollout analyses out (memory first, then the stream).

Wiring only: settings, the broker and its subscribers, and the clients made in
the lifespan. The work is in `Analyzer.handle` (this module) and `analysis`.

Every analyzer process is one consumer of the `analyzers` group on the scored
stream, so any number of them (`--workers N`, or processes on other machines)
share the work and each entry is analysed by one of them:
- `on_scored` reads new entries, up to `max_in_flight` at once;
- `on_reclaimed` takes over entries a dead or failing analyzer left pending
  (XAUTOCLAIM after `reclaim_idle_ms`), and dead-letters those delivered more
  than `max_deliveries` times.

An analysis is written to memory (idempotent: its object id is derived from
the rollout) and then announced and acked in one Lua script, so a crash in
between only redoes the memory write; the script announces a rollout once,
however often it is analysed (see `_ANNOUNCE`). An analyst that fails leaves the entry pending
for a retry; once dead-lettered, the summarizer's step deadline summarizes the
step without it and lists the rollout as missing.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import msgspec
from faststream import Context, FastStream
from faststream.middlewares import AckPolicy
from faststream.redis import StreamSub
from faststream.redis.annotations import RedisStreamMessage
from redis.asyncio import Redis

from common import service, streams
from common.embedder import make_embedder
from common.llm import LLMError, LLMGateway
from common.memory import Memory, MemoryItem, MemoryKind
from common.metrics import Metrics
from rubricd import wire
from rubricd.keys import ANALYZERS, Keys
from rubricd.messages import RolloutAnalysis, Rubric, ScoredRollout
from rubricd.store import RubricStore

from .analysis import AnalysisDraft, AnalysisFailed, analyze_rollout, load_template, render
from .settings import AnalyzerSettings

SERVICE = "analyzer"
log = logging.getLogger("rubricd.analyzer")

# The step's set of analysed rollout ids makes the announcement once-only: an
# entry analysed twice (reclaimed while still in flight, or re-scored) is acked
# but not announced again. KEYS: step analyses, analyses, events, scored.
# ARGV: rollout id, analysis, event, maxlen, group, entry id
_ANNOUNCE = """
local first = redis.call('SADD', KEYS[1], ARGV[1])
if first == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', '__data__', ARGV[2])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', '__data__', ARGV[3])
end
redis.call('XACK', KEYS[4], ARGV[5], ARGV[6])
return first
"""


class Analyzer:
    """Turns one scored-stream entry into one stored and announced analysis (or a dead letter)."""

    def __init__(self, settings: AnalyzerSettings, redis: Redis, gateway: LLMGateway, memory: Memory, metrics: Metrics,
                 consumer: str = "") -> None:  # fmt: skip
        self.settings = settings
        self.analysed = metrics.counter("rubricd_analyses", "rollouts analysed: announced, or a repeat acked silently", ["outcome"])
        self.flagged = metrics.counter("rubricd_analyses_flagging_hacking", "analyses that report reward-hacking evidence")
        self.consumer = consumer
        self.keys = Keys(settings.namespace)
        self.redis = redis
        self.gateway = gateway
        self.memory = memory
        self.store = RubricStore(redis, self.keys)
        self.template = load_template(settings.analyzer_prompt)
        self._rubrics: dict[tuple[str, str | None, int], list[Rubric]] = {}
        self._announce = redis.register_script(_ANNOUNCE)

    async def handle(self, msg: RedisStreamMessage) -> None:
        entry_id = msg.raw_message["message_ids"][0]
        try:
            scored = wire.decode(msg.body, ScoredRollout)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            await streams.dead_letter(self.redis, self.keys, msg, service=SERVICE, reason=f"malformed scored rollout: {e}")
            return
        try:
            rubrics = await self.rubrics(scored)
            analysis = await analyze_rollout(scored, rubrics, self.template, self.call_analyst,
                                             max_chars=self.settings.max_text_chars)  # fmt: skip
            await self.memory.put([memory_item(analysis)])
            first = await self.announce(entry_id, analysis)
        except Exception as e:
            # Left pending: a reclaiming analyzer retries it, then dead-letters it.
            await self.redis.set(self.keys.failure(self.keys.scored, entry_id.decode()), repr(e), ex=86_400)
            raise
        self.analysed.labels("announced" if first else "repeat").inc()
        if first and analysis.reward_hacking:
            self.flagged.inc()

    async def announce(self, entry_id: bytes, analysis: RolloutAnalysis) -> bool:
        """Publish the analysis (unless announced before), log it and ack its entry, all or nothing."""
        event = streams.event(
            SERVICE, "rollout_analysed", run_id=analysis.run_id, step=analysis.step, rollout_id=analysis.rollout_id,
            hacking=",".join(sorted({e.type for e in analysis.reward_hacking})), consumer=self.consumer,
        )  # fmt: skip
        first = await self._announce(
            keys=[self.keys.step_analyses(analysis.run_id, analysis.step), self.keys.analyses, self.keys.events, self.keys.scored],
            args=[analysis.rollout_id, wire.encode(analysis), wire.encode(event), self.settings.stream_maxlen, ANALYZERS, entry_id],
        )
        return bool(first)

    async def give_up(self, msg: RedisStreamMessage, deliveries: int) -> None:
        entry_id = msg.raw_message["message_ids"][0].decode()
        last_error = await self.redis.get(self.keys.failure(self.keys.scored, entry_id))
        reason = f"failed {deliveries} deliveries (max_deliveries={self.settings.max_deliveries})"
        if last_error:
            reason += f"; last error: {last_error.decode()}"
        await streams.dead_letter(self.redis, self.keys, msg, service=SERVICE, reason=reason, deliveries=deliveries)

    async def rubrics(self, scored: ScoredRollout) -> list[Rubric]:
        """The rubrics the score was given with (for their criteria); versions never change, so cached."""
        score = scored.score
        key = (score.run_id, score.instance_key, score.rubric_version)
        if key not in self._rubrics:
            found = await self.store.version(*key)
            if found is None:  # a rejected score, or a version since deleted: results still name ids
                return []
            self._rubrics[key] = found.rubrics
        return self._rubrics[key]

    async def call_analyst(self, messages: list[dict[str, str]]) -> AnalysisDraft:
        try:
            return (await self.gateway.structured("analyzer", messages, AnalysisDraft)).value
        except LLMError as e:
            raise AnalysisFailed(str(e)) from None


def memory_item(analysis: RolloutAnalysis) -> MemoryItem:
    return MemoryItem(
        kind=MemoryKind.ANALYSIS,
        run_id=analysis.run_id,
        step=analysis.step,
        text=render(analysis),
        ref=analysis.rollout_id,
        instance_key=analysis.instance_key,
        message=wire.encode(analysis),
    )


def create_app(settings: AnalyzerSettings, metrics: Metrics | None = None) -> FastStream:
    keys = Keys(settings.namespace)
    consumer = service.consumer_name(settings)
    metrics = metrics or Metrics(SERVICE)
    broker = service.make_broker(settings, metrics)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        redis = service.make_redis(settings)
        gateway = LLMGateway.from_settings(settings, ["analyzer", "embedder"])
        metrics.watch_gateway(gateway)
        memory = await Memory.connect(settings, make_embedder(settings, gateway))
        # Created at 0: rollouts scored before any analyzer ran are analysed too.
        await streams.ensure_group(redis, keys.scored, ANALYZERS)
        broker.context.set_global("analyzer", Analyzer(settings, redis, gateway, memory, metrics, consumer))
        # The analyses waiting: what tells an operator (or KEDA) to add analyzer workers.
        backlog = asyncio.create_task(metrics.watch_groups(redis, [(keys.scored, ANALYZERS)]))
        try:
            yield
        finally:
            backlog.cancel()
            await memory.close()
            await gateway.aclose()
            await redis.aclose()

    @broker.subscriber(
        stream=StreamSub(keys.scored, group=ANALYZERS, consumer=consumer, max_records=settings.max_records),
        max_workers=settings.max_in_flight,
        ack_policy=AckPolicy.MANUAL,
    )
    async def on_scored(msg: RedisStreamMessage, analyzer: Analyzer = Context("analyzer")) -> None:
        await analyzer.handle(msg)

    @broker.subscriber(
        stream=StreamSub(keys.scored, group=ANALYZERS, consumer=f"{consumer}-reclaim", min_idle_time=settings.reclaim_idle_ms),
        max_workers=max(1, settings.max_in_flight // 4),
        ack_policy=AckPolicy.MANUAL,
    )
    async def on_reclaimed(msg: RedisStreamMessage, analyzer: Analyzer = Context("analyzer")) -> None:
        deliveries = await msg.get_delivery_count()
        if deliveries > settings.max_deliveries:
            await analyzer.give_up(msg, deliveries)
        else:
            await analyzer.handle(msg)

    async def announce() -> None:
        analyzer: Analyzer = broker.context.get("analyzer")
        await service.announce_started(analyzer.redis, keys, SERVICE, settings.stream_maxlen, consumer=consumer,
                                       max_in_flight=settings.max_in_flight)  # fmt: skip

    return FastStream(broker, lifespan=lifespan, after_startup=[announce])


def main() -> None:
    service.run(SERVICE, AnalyzerSettings, create_app)
