"""The scorer service: rollouts in, scores out.

Wiring only: settings, the broker and its subscribers, and the clients made in
the lifespan. The work is in `Scorer.handle` (this module) and `scoring`.

Three subscribers share the rollouts stream's consumer group:
- `on_rollout` reads new entries, up to `max_in_flight` at once;
- `on_reclaimed` takes over entries a dead scorer left pending (XAUTOCLAIM
  after `reclaim_idle_ms`), and dead-letters those delivered too often;
- `on_rubrics_updated` (no group: every scorer sees every update) drops the
  cached rubric set so the next rollout uses the new version.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import msgspec
from faststream import Context, FastStream
from faststream.middlewares import AckPolicy
from faststream.redis import StreamSub
from faststream.redis.annotations import RedisStreamMessage
from redis.asyncio import Redis

from common import service, streams
from common.llm import LLMError, LLMGateway
from common.metrics import Metrics
from common.seeds import Seeds
from rubricd import wire
from rubricd.keys import SCORERS, InvalidKey, Keys
from rubricd.messages import Event, JudgeStatus, Rollout, RubricsUpdated, Score
from rubricd.reward import policy
from rubricd.store import RubricStore

from . import judge
from .effects import Effects
from .scoring import JudgeFailed, RubricCache, score_rollout
from .settings import ScorerSettings

SERVICE = "scorer"
log = logging.getLogger("rubricd.scorer")


JUDGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)
REWARD_BUCKETS = tuple(i / 10 for i in range(11))


class ScorerMetrics:
    """The scorer's own figures, beside FastStream's and the LLM gateway's."""

    def __init__(self, metrics: Metrics) -> None:
        self.scores = metrics.counter("rubricd_scores", "rollouts scored, by status (ok, judge_failed, rejected)", ["status"])
        self.judge_seconds = metrics.histogram("rubricd_judge_seconds", "judge latency, retries included", JUDGE_BUCKETS)
        self.reward = metrics.histogram("rubricd_reward", "rewards given (status ok)", REWARD_BUCKETS)
        self.rubric_version = metrics.gauge("rubricd_rubric_version", "rubric version of the run's latest score (global sets)", ["run_id"])

    def observe(self, score: Score) -> None:
        self.scores.labels(score.status).inc()
        if score.judge_ms is not None:
            self.judge_seconds.observe(score.judge_ms / 1000)
        if score.reward is not None:
            self.reward.observe(score.reward)
        if score.instance_key is None:  # per-instance sets would make one series per prompt
            self.rubric_version.labels(score.run_id).set(score.rubric_version)


class Scorer:
    """Turns one stream entry into one committed Score (or a dead letter)."""

    def __init__(self, settings: ScorerSettings, redis: Redis, gateway: LLMGateway, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = ScorerMetrics(metrics)
        self.keys = Keys(settings.namespace)
        self.redis = redis
        self.gateway = gateway
        self.policy = policy(settings.reward_policy)
        self.rubrics = RubricCache(
            RubricStore(redis, self.keys),
            seeds=Seeds.load(settings),
            template=judge.load_template(settings.judge_prompt),
            per_instance=settings.rubrics_mode == "per_instance",
        )
        self.effects = Effects(
            redis,
            self.keys,
            SCORERS,
            score_ttl_s=settings.score_ttl_s,
            maxlen=settings.stream_maxlen,
            reply_ttl_s=settings.reply_ttl_s,
        )

    async def handle(self, msg: RedisStreamMessage) -> None:
        entry_id = msg.raw_message["message_ids"][0]
        try:
            rollout = self.validate(msg.body)
        except Rejected as e:
            notify = self.rejection(msg.body, str(e))
            await streams.dead_letter(self.redis, self.keys, msg, service=SERVICE, reason=str(e), notify=notify)
            self.metrics.scores.labels(JudgeStatus.REJECTED).inc()
            return
        try:
            rubrics = await self.rubrics.get(rollout)
            score = await score_rollout(rollout, rubrics, self.call_judge, self.policy, self.settings.reward_policy)
            first = await self.effects.commit(entry_id, rollout, score, self.event(rollout, score))
        except Exception as e:
            # Left pending: a reclaiming scorer retries it, then dead-letters it.
            await self.redis.set(self.keys.failure(self.keys.rollouts, entry_id.decode()), repr(e), ex=86_400)
            raise
        if not first:
            log.info("rollout %s/%s was already scored; replied with its first score", rollout.run_id, rollout.rollout_id)
            return
        self.metrics.observe(score)
        if self.settings.log_rollout_text:
            log.info("scored %s/%s: reward %s (%s)\nprompt: %s\nresponse: %s", rollout.run_id, rollout.rollout_id,
                     score.reward, score.status, rollout.prompt, rollout.response)  # fmt: skip

    async def give_up(self, msg: RedisStreamMessage, deliveries: int) -> None:
        entry_id = msg.raw_message["message_ids"][0].decode()
        last_error = await self.redis.get(self.keys.failure(self.keys.rollouts, entry_id))
        reason = f"failed {deliveries} deliveries (max_deliveries={self.settings.max_deliveries})"
        if last_error:
            reason += f"; last error: {last_error.decode()}"
        await streams.dead_letter(self.redis, self.keys, msg, service=SERVICE, reason=reason, deliveries=deliveries)

    def validate(self, body: bytes) -> Rollout:
        if len(body) > self.settings.max_rollout_bytes:
            raise Rejected(f"oversized rollout: {len(body)} bytes > max_rollout_bytes={self.settings.max_rollout_bytes}")
        try:
            rollout = wire.decode(body, Rollout)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise Rejected(f"malformed rollout: {e}") from None
        if rollout.reply_to is not None:
            try:
                self.keys.check_reply_to(rollout.reply_to)
            except InvalidKey as e:
                raise Rejected(str(e)) from None
        return rollout

    def rejection(self, body: bytes, reason: str) -> tuple[str, Score] | None:
        """A rejected Score for the trainer, if the entry says where to send it."""
        try:
            addressed = msgspec.json.decode(body, type=_Addressed)
            reply_to = self.keys.check_reply_to(addressed.reply_to or "")
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidKey):
            return None
        score = Score(
            run_id=addressed.run_id, rollout_id=addressed.rollout_id, step=addressed.step,
            status=JudgeStatus.REJECTED, reward=None, rubric_version=0, error=reason, scored_at=time.time(),
        )  # fmt: skip
        return reply_to, score

    async def call_judge(self, messages: list[dict[str, str]]) -> judge.JudgeVerdict:
        try:
            return (await self.gateway.structured("judge", messages, judge.JudgeVerdict)).value
        except LLMError as e:
            raise JudgeFailed(str(e)) from None

    @staticmethod
    def event(rollout: Rollout, score: Score) -> Event:
        kind = "rollout_scored" if score.status is JudgeStatus.OK else str(score.status)
        return streams.event(
            SERVICE,
            kind,
            run_id=rollout.run_id,
            step=rollout.step,
            rollout_id=rollout.rollout_id,
            detail=score.error or "",
            reward=score.reward,
            rubric_version=score.rubric_version,
            judge_ms=score.judge_ms,
        )


class _Addressed(msgspec.Struct):
    """The fields a rejection needs, read leniently from an entry that failed validation."""

    run_id: str
    rollout_id: str
    step: int = 0
    reply_to: str | None = None


class Rejected(Exception):
    """A rollout that can never be scored as sent: it goes to the dead letters."""


def create_app(settings: ScorerSettings, metrics: Metrics | None = None) -> FastStream:
    keys = Keys(settings.namespace)
    consumer = service.consumer_name(settings)
    metrics = metrics or Metrics(SERVICE)
    broker = service.make_broker(settings, metrics)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        redis = service.make_redis(settings)
        gateway = LLMGateway.from_settings(settings, ["judge"])
        metrics.watch_gateway(gateway)
        # Created at 0, not $: rollouts published before any scorer ran are scored too.
        await streams.ensure_group(redis, keys.rollouts, SCORERS)
        scorer = Scorer(settings, redis, gateway, metrics)
        broker.context.set_global("scorer", scorer)
        chores = [asyncio.create_task(trim_forever(redis, keys.rollouts, settings.trim_interval_s)),
                  asyncio.create_task(metrics.watch_groups(redis, [(keys.rollouts, SCORERS)]))]  # fmt: skip
        try:
            yield
        finally:
            for chore in chores:
                chore.cancel()
            await gateway.aclose()
            await redis.aclose()

    @broker.subscriber(
        stream=StreamSub(keys.rollouts, group=SCORERS, consumer=consumer, max_records=settings.max_records),
        max_workers=settings.max_in_flight,
        ack_policy=AckPolicy.MANUAL,
    )
    async def on_rollout(msg: RedisStreamMessage, scorer: Scorer = Context("scorer")) -> None:
        await scorer.handle(msg)

    @broker.subscriber(
        stream=StreamSub(
            keys.rollouts, group=SCORERS, consumer=f"{consumer}-reclaim", min_idle_time=settings.reclaim_idle_ms
        ),
        max_workers=max(1, settings.max_in_flight // 4),
        ack_policy=AckPolicy.MANUAL,
    )
    async def on_reclaimed(msg: RedisStreamMessage, scorer: Scorer = Context("scorer")) -> None:
        deliveries = await msg.get_delivery_count()
        if deliveries > settings.max_deliveries:
            await scorer.give_up(msg, deliveries)
        else:
            await scorer.handle(msg)

    @broker.subscriber(stream=StreamSub(keys.rubrics_updated))
    async def on_rubrics_updated(msg: RedisStreamMessage, scorer: Scorer = Context("scorer")) -> None:
        update = wire.decode(msg.body, RubricsUpdated)
        scorer.rubrics.invalidate(update.run_id, update.instance_key)

    async def announce() -> None:
        scorer: Scorer = broker.context.get("scorer")
        await service.announce_started(scorer.redis, keys, SERVICE, settings.stream_maxlen, consumer=consumer,
                                       max_in_flight=settings.max_in_flight)  # fmt: skip

    return FastStream(broker, lifespan=lifespan, after_startup=[announce])


async def trim_forever(redis: Redis, stream: str, interval_s: float) -> None:
    """Keep the rollouts stream bounded: drop what the scorers have acked."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await streams.trim_consumed(redis, stream)
        except Exception:
            log.exception("trimming %s failed", stream)


def main() -> None:
    service.run(SERVICE, ScorerSettings, create_app)
