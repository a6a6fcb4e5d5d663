"""The chaos suite: a multi-step training run while services are SIGKILLed at random and Redis restarts once.

Two processes of each service run the loop on the suite's Redis, Weaviate and
simulator (every LLM call 100-300 ms, so kills land mid-call). A trainer in
synchronous mode scores each step, closes it with its rollout ids and waits for
its rubrics, while a chaos task kills a random service every few seconds
(SIGKILL: no cleanup, no ack) and starts a fresh one, and stops Redis for a
few seconds once, mid-run (its append-only file keeps what was written).

After the last fault the loop must drain within DRAIN_BOUND_S, and then:
every rollout was scored exactly once and the trainer got that score; nothing
valid was dead-lettered; every step was summarized once with every analysis;
rubric versions are contiguous; the trainer never saw a connection error.
Run with `-s` for the figures.
"""

import asyncio
import collections
import random
import time

import httpx
import pytest
from redis.asyncio import Redis

from demo.policy import respond
from rubricd import RubricdClient, wire
from rubricd.messages import Event, EventKind, JudgeStatus, Rollout, Score, ScoredRollout, StepSummary
from rubricd.store import RubricStore

pytestmark = pytest.mark.integration

RUN, STEPS, PER_STEP = "chaos", 8, 16
SERVICES = ("scorer", "analyzer", "summarizer", "updater")
FAULTY_STEPS = 6  # faults during steps 0..5; steps 6 and 7 run on a healed stack
KILL_EVERY_S = (2.0, 5.0)
REDIS_DOWN_S = 3.0
# After the last fault: a dead consumer's work is reclaimed after RECLAIM_IDLE_MS (5 s), a dead summarizer's
# claim or updater's lock lapses after 15 s, then the remaining steps run (a few seconds each).
DRAIN_BOUND_S = 90.0


async def simulator(stack, **config) -> None:
    async with httpx.AsyncClient() as http:
        (await http.post(f"{stack.llm_base_url.removesuffix('/v1')}/admin/config", json=config)).raise_for_status()


def step_rollouts(step: int, rng: random.Random) -> list[Rollout]:
    out = []
    for i in range(PER_STEP):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        behaviour = "padded" if i % 4 == 3 else "correct"
        response = respond(behaviour, a, b)
        out.append(
            Rollout(
                run_id=RUN,
                rollout_id=f"s{step}-r{i}",
                step=step,
                prompt=f"What is {a} + {b}?",
                response=response,
                reference=str(a + b),
            )
        )
    return out


class Chaos:
    """Kills a random service process every few seconds and starts a fresh one; restarts Redis once."""

    def __init__(self, stack, start_service, processes: list, rng: random.Random) -> None:
        self.stack, self.start_service, self.processes, self.rng = stack, start_service, processes, rng
        self.kills: collections.Counter[str] = collections.Counter()
        self.redis_restarts = 0
        self.last_fault = time.monotonic()
        self.restart_redis_after = rng.uniform(10.0, 20.0)

    async def run(self) -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(self.rng.uniform(*KILL_EVERY_S))
            if not self.redis_restarts and time.monotonic() - started > self.restart_redis_after:
                await asyncio.to_thread(self.stack.sh, "down", "redis")
                await asyncio.sleep(REDIS_DOWN_S)
                await asyncio.to_thread(self.stack.sh, "up", "redis")
                self.redis_restarts += 1
            else:
                victim = self.rng.choice(self.processes)
                victim.kill()
                self.kills[victim.service] += 1
                self.processes.remove(victim)
                self.processes.append(self.start_service(victim.service, wait=False))
            self.last_fault = time.monotonic()


@pytest.mark.timeout(600)
async def test_a_run_under_random_kills_and_a_redis_restart_loses_nothing_and_does_nothing_twice(
    stack, redis, keys, start_service, settled
):
    rng = random.Random(20261123)
    await simulator(stack, latency_ms=200, latency_jitter_ms=100)
    processes = [start_service(name, wait=False) for name in SERVICES for _ in range(2)]
    for process in processes:
        process.wait_consuming(stack.redis_url, keys)
    chaos = Chaos(stack, start_service, processes, rng)
    got: dict[str, Score] = {}
    errors: list[BaseException] = []
    began = time.monotonic()
    try:
        async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
            faults = asyncio.create_task(chaos.run())
            for step in range(STEPS):
                if step == FAULTY_STEPS:
                    faults.cancel()
                    await asyncio.gather(faults, return_exceptions=True)
                    healed = chaos.last_fault
                batch = step_rollouts(step, rng)
                try:
                    for score in await client.score(batch, timeout=180):
                        got[score.rollout_id] = score
                    await client.close_step(RUN, step, rollout_ids=[r.rollout_id for r in batch])
                    await client.wait_for_rubrics(RUN, step, timeout=180)
                except Exception as e:  # a connection error reaching the trainer is a failure of this test
                    errors.append(e)
                    raise
    finally:
        await simulator(stack, latency_ms=0, latency_jitter_ms=0)
    fresh = Redis.from_url(stack.redis_url, decode_responses=False)  # the fixture's client predates the restart
    try:
        await settled(fresh, DRAIN_BOUND_S)
        drained = time.monotonic() - healed
        await check_outcome(fresh, keys, got)
    finally:
        await fresh.aclose()
    print(
        f"\nchaos: {STEPS} steps x {PER_STEP} rollouts in {time.monotonic() - began:.0f} s; "
        f"{sum(chaos.kills.values())} SIGKILLs {dict(chaos.kills)}, {chaos.redis_restarts} Redis restart "
        f"({REDIS_DOWN_S:g} s down); drained {drained:.1f} s after the last fault (bound {DRAIN_BOUND_S:g} s)"
    )
    assert not errors
    assert chaos.redis_restarts == 1 and sum(chaos.kills.values()) >= 5
    assert drained < DRAIN_BOUND_S


async def check_outcome(redis: Redis, keys, got: dict[str, Score]) -> None:
    expected = {f"s{step}-r{i}" for step in range(STEPS) for i in range(PER_STEP)}
    # Every rollout scored exactly once, handed on once, and what the trainer got is what is stored.
    assert set(got) == expected
    assert all(s.status is JudgeStatus.OK for s in got.values()), [s.detail for s in got.values() if s.detail][:3]
    handed_on = [
        wire.decode(wire.payload(f), ScoredRollout).score.rollout_id for _, f in await redis.xrange(keys.scored)
    ]
    assert sorted(handed_on) == sorted(expected)
    for rollout_id, score in got.items():
        assert wire.decode(await redis.get(keys.score(RUN, rollout_id)), Score) == score
    # Nothing valid was dead-lettered.
    assert await redis.xlen(keys.dead_letters) == 0
    # Every step summarized once, with every analysis.
    events = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    summarized = [e for e in events if e.kind == EventKind.STEP_SUMMARIZED and e.run_id == RUN]
    assert sorted(e.step for e in summarized) == list(range(STEPS))
    assert all(e.fields["analyses"] == PER_STEP and e.fields["missing"] == 0 for e in summarized), summarized
    summaries = [wire.decode(wire.payload(f), StepSummary) for _, f in await redis.xrange(keys.summaries)]
    assert sorted(s.step for s in summaries) == list(range(STEPS))
    # Rubric versions contiguous, at most one a step.
    history = await RubricStore(redis, keys).history(RUN)
    assert [s.version for s in history] == list(range(1, len(history) + 1))
    made_from = [s.step for s in history[1:]]
    assert len(made_from) == len(set(made_from))
