"""The gateway's work: a request's samples become rollouts on the stream, and their scores come back.

One RubricdClient per process, with its own reply stream, serves every request at once. Rollout ids are
derived, never drawn: from the request's idempotency key (`Idempotency-Key` or `X-Request-Id`) and the
sample's index, else from a hash of (run, step, prompt, response, reference, index, its group and index there where
it has one, and the trajectory, its tools and prompt turns where it has one). A retried request
therefore names the same rollouts: those the scorer has scored are answered with the Score it stored
(`Keys.score`, kept RUBRICD_ANSWER_TTL_S), unpublished and unjudged; the rest are published again, and the
scorer replies to a rollout it scored meanwhile with its first Score.
"""

import contextlib
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import msgspec
from redis.exceptions import NoPermissionError

from rubricd import wire
from rubricd.client import ArmRewardTimeout, InvalidRollout, RubricdClient, ScoreTimeout
from rubricd.messages import AnalysisSample, ArmReward, ArmRollout, JudgeMode, Rollout, Score, TrainingContext
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import Clients

from .contracts import Sample
from .settings import GatewaySettings

SERVICE = "gateway"
log = logging.getLogger("rubricd.gateway")
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,120}$")  # a key usable as is inside a rollout id


class Busy(Exception):
    """More rollouts than max_rollouts_in_flight would be waited for: answer 429."""


@dataclass(frozen=True)
class Call:
    """Where one request's rollouts go, how long it waits for them, and the run's choices they carry (the size of
    a sample group that does not give its own, how they are judged and analysed: Rollout's fields)."""

    run_id: str
    step: int
    deadline_s: float
    context: TrainingContext = TrainingContext()
    evaluation: bool = False
    key: str | None = None  # the request's idempotency key
    group_size: int | None = None
    judge_mode: JudgeMode | None = None
    judge_votes: int | None = None
    analysis_sample: AnalysisSample | None = None


def rollout_ids(call: Call, samples: Sequence[Sample]) -> list[str]:
    if call.key is not None:
        base = call.key if _SAFE_KEY.fullmatch(call.key) else hashlib.sha256(call.key.encode()).hexdigest()[:32]
        return [f"k-{base}.{i}" for i in range(len(samples))]
    return ["h-" + hashlib.sha256(_hashed(call, s, i)).hexdigest()[:40] for i, s in enumerate(samples)]


def _hashed(call: Call, s: Sample, index: int) -> bytes:
    text = json.dumps([call.run_id, call.step, s.prompt, s.response, s.reference, index]).encode()
    if s.group is not None:  # identical responses of one group are members apart
        text += json.dumps([s.group, s.index]).encode()
    return text + msgspec.json.encode([s.trajectory, s.tools, s.prompt_turns]) if s.trajectory else text


def rollouts_of(call: Call, samples: Sequence[Sample]) -> list[Rollout]:
    """The samples as the rollouts to score; InvalidRollout for one the Rollout's own checks refuse (a malformed
    trajectory)."""
    try:
        return [
            Rollout(
                run_id=call.run_id,
                rollout_id=rollout_id,
                step=call.step,
                prompt=s.prompt,
                response=s.response,
                reference=s.reference,
                context=call.context,
                evaluation=call.evaluation,
                trajectory=s.trajectory,
                tools=s.tools,
                prompt_turns=s.prompt_turns,
                group=s.group,
                group_size=(s.group_size or call.group_size) if s.group is not None else None,
                judge_mode=call.judge_mode,
                judge_votes=call.judge_votes,
                analysis_sample=call.analysis_sample,
            )
            for rollout_id, s in zip(rollout_ids(call, samples), samples)
        ]
    except ValueError as e:
        raise InvalidRollout(str(e)) from None


class RewardGateway:
    """The worker: the client, and the count of rollouts waited for."""

    def __init__(self, settings: GatewaySettings, clients: Clients) -> None:
        self.settings = settings
        self.client = RubricdClient(namespace=settings.namespace, redis=clients.redis, timeout=settings.deadline_s)
        self.in_flight = 0
        self._warned = False
        self.metrics = GatewayMetrics(clients.metrics)

    async def score(self, call: Call, samples: Sequence[Sample]) -> list[Score | None]:
        """Each sample's Score, None where none came by the deadline. Raises Busy beyond the bound (nothing is
        published), InvalidRollout for a rollout the scorer would reject (a run id or step outside its bounds, a
        malformed trajectory)."""
        rollouts = rollouts_of(call, samples)
        async with self.holding(len(rollouts)):
            scored = await self.stored(rollouts)
            waiting = [r for r in rollouts if r.rollout_id not in scored]
            if waiting:
                self.metrics.published.inc(len(waiting))
                try:
                    scored |= {s.rollout_id: s for s in await self.client.score(waiting, timeout=call.deadline_s)}
                except ScoreTimeout as e:
                    self.metrics.timed_out.inc(len(e.missing))
                    scored |= e.scores
            return [scored.get(r.rollout_id) for r in rollouts]

    async def arm_rewards(self, call: Call, rollouts: Sequence[ArmRollout]) -> list[ArmReward | None]:
        """Each Rubric-ARM rollout's reward, None where none came by the deadline; the in-flight bound as `score`'s.
        Raises InvalidRollout for a rollout the arm service would reject as sent."""
        async with self.holding(len(rollouts)):
            self.metrics.published.inc(len(rollouts))
            try:
                found = {r.rollout_id: r for r in await self.client.arm_rewards(rollouts, timeout=call.deadline_s)}
            except ArmRewardTimeout as e:
                self.metrics.timed_out.inc(len(e.missing))
                found = e.rewards
            return [found.get(r.rollout_id) for r in rollouts]

    @contextlib.asynccontextmanager
    async def holding(self, n: int) -> AsyncIterator[None]:
        """Count `n` more rollouts waited for while the block runs; raise Busy, having counted nothing, beyond
        max_rollouts_in_flight."""
        if self.in_flight + n > self.settings.max_rollouts_in_flight:
            raise Busy(
                f"{self.in_flight} rollouts in flight; {n} more would exceed {self.settings.max_rollouts_in_flight}"
            )
        self.in_flight += n
        self.metrics.in_flight.set(self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= n
            self.metrics.in_flight.set(self.in_flight)

    async def stored(self, rollouts: Sequence[Rollout]) -> dict[str, Score]:
        """The Scores the scorer already gave to some of `rollouts` (a retried request), by rollout id."""
        if not rollouts:
            return {}
        keys = self.client.keys
        try:
            found = await self.client.redis.mget([keys.score(r.run_id, r.rollout_id) for r in rollouts])
        except NoPermissionError:  # a Redis user without read access to scores: the scorer answers instead
            if not self._warned:
                log.warning(
                    "cannot read stored scores (%s): retried requests are published again", keys.score("*", "*")
                )
                self._warned = True
            return {}
        return {r.rollout_id: wire.decode(data, Score) for r, data in zip(rollouts, found) if data is not None}

    async def close(self) -> None:
        await self.client.close()


class GatewayMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self.requests = metrics.counter(
            "rubricd_gateway_requests",
            "requests, by contract (nemo_gym_metrics: NeMo Gym's aggregate metrics, not rewards) and answer (ok, busy, invalid)",
            ["contract", "answer"],
        )
        self.no_reward = metrics.counter(
            "rubricd_gateway_no_reward",
            "samples answered with the failure form, by contract and why (judge_failed, masked, timed_out)",
            ["contract", "reason"],
        )
        self.published = metrics.counter(
            "rubricd_gateway_published", "rollouts published (a retried request's scored ones are not)"
        )
        self.timed_out = metrics.counter("rubricd_gateway_timed_out", "rollouts with no score by their deadline")
        self.in_flight = metrics.gauge("rubricd_gateway_in_flight", "rollouts waited for now")
