"""The chaos suite: a multi-step training run while services are SIGKILLed at random and Redis stops several times.

Two processes of each service run the loop on the suite's Redis, Weaviate and
simulator (every LLM call 100-300 ms, so kills land mid-call). A trainer in
synchronous mode scores each step, closes it with its rollout ids and waits for
its rubrics, while the chaos kills a random service in every faulty step (a
moment after its rollouts are published) and every few seconds (SIGKILL: no
cleanup, no ack), each time starting a fresh one, and stops Redis REDIS_STOPS times,
at least once with SHUTDOWN (it fsyncs its append-only file) and once with
SIGKILL (a crash: appendfsync everysec, no last fsync). A stop lands a random
0-3 s after a step's rollouts are published: scorers and analyzers are waking
from XREADGROUP, handling and committing, and the idle groups' consumers block
in XREADGROUP (each stop records how many clients Redis had blocked there).

One seed picks every random choice (RUBRICD_CHAOS_SEED, default DEFAULT_SEED):
the rollouts, the kills' victims and intervals, the steps Redis stops in, when,
how and for how long. `make chaos SEEDS=5` runs seeds 1..5 and prints a table
of the figures each seed writes to .stack/artifacts/chaos/ (`python
tests/system/test_chaos.py` prints it).

Within DRAIN_BOUND_S of the last fault (checked before the healed steps run,
so their run time under load does not count) the loop must drain: no entry
pending and none unread in any consumer group of the namespace's streams, and
every faulty step summarized; after the last step, the same. Then: every rollout was scored exactly once and the trainer
got that score; nothing valid was dead-lettered; every step was summarized once
with every analysis; rubric versions are contiguous; the trainer never saw a
connection error; every service process rode through the outages.
Run with `-s` for the figures.
"""

import asyncio
import collections
import contextlib
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from rubricd import RubricdClient, wire
from rubricd.keys import Keys
from rubricd.messages import (
    DeadLetter,
    Event,
    EventKind,
    JudgeStatus,
    Rollout,
    Score,
    ScoredRollout,
    StepSummary,
)
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import answer, configure_llm

pytestmark = pytest.mark.integration

DEFAULT_SEED = 20261123
SEED = int(os.environ.get("RUBRICD_CHAOS_SEED") or DEFAULT_SEED)
FIGURES_DIR = Path(__file__).resolve().parents[2] / ".stack" / "artifacts" / "chaos"

RUN, STEPS, PER_STEP = "chaos", 8, 16
SERVICES = ("scorer", "analyzer", "summarizer", "updater")
FAULTY_STEPS = 6  # faults during steps 0..5; steps 6 and 7 run on a healed stack
KILL_EVERY_S = (2.0, 5.0)
KILL_IN_STEP_S = (0.1, 1.5)  # each faulty step's own kill, after its rollouts are published (however fast it runs)
REDIS_STOPS = 3  # in distinct faulty steps: a SHUTDOWN, a SIGKILL, and one of either
REDIS_STOP_AFTER_S = (0.0, 3.0)  # after the step's rollouts are published
REDIS_DOWN_S = (1.0, 4.0)
# A SIGKILLed redis-server loses nothing it answered: it writes the append-only file before it answers, and the
# kernel keeps what was written. A host crash loses what was not fsynced yet (everysec: up to about a second).
# RUBRICD_CHAOS_LOSE_S=1 plays that crash: after each SIGKILL the AOF is cut back to its size that long before.
LOSE_S = float(os.environ.get("RUBRICD_CHAOS_LOSE_S") or 0)
# After the last fault: a dead consumer's work is reclaimed after RECLAIM_IDLE_MS (5 s), a dead summarizer's
# claim or updater's lock lapses after 15 s, then the remaining steps run (a few seconds each).
DRAIN_BOUND_S = 90.0


def step_rollouts(step: int, rng: random.Random) -> list[Rollout]:
    out = []
    for i in range(PER_STEP):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        out.append(answer(a, b, "padded" if i % 4 == 3 else "correct", i, run_id=RUN, step=step))
    return out


@dataclass
class RedisStop:
    """One planned Redis stop, and what it found when it came."""

    step: int  # stops while this step runs
    after_s: float  # this long after the step's rollouts were published
    how: str  # shutdown | sigkill
    down_s: float
    at_s: float | None = None  # when it came, after the publish (a service restart in progress delays it)
    blocked_in_xreadgroup: int | None = None  # clients Redis had blocked in XREADGROUP just before
    lost_bytes: int = 0  # of the AOF, cut after a SIGKILL (LOSE_S)


def plan_redis_stops(rng: random.Random) -> list[RedisStop]:
    steps = sorted(rng.sample(range(FAULTY_STEPS), REDIS_STOPS))
    hows = ["shutdown", "sigkill", *(rng.choice(["shutdown", "sigkill"]) for _ in range(REDIS_STOPS - 2))]
    rng.shuffle(hows)
    return [
        RedisStop(step=s, after_s=rng.uniform(*REDIS_STOP_AFTER_S), how=h, down_s=rng.uniform(*REDIS_DOWN_S))
        for s, h in zip(steps, hows)
    ]


@dataclass
class Figures:
    """What one seed did and found; written to FIGURES_DIR/seed-<seed>.json."""

    seed: int
    passed: bool = False
    error: str | None = None
    kills: dict[str, int] = field(default_factory=dict)
    redis_stops: list[dict[str, Any]] = field(default_factory=list)
    drain_s: float | None = None
    pending_at_end: int | None = None
    unread_at_end: int | None = None
    dead_letters: int | None = None
    stuck: list[dict[str, Any]] = field(default_factory=list)  # XPENDING of what stayed pending
    run_s: float | None = None

    def line(self) -> str:
        hows = collections.Counter(s["how"] for s in self.redis_stops)
        drain = "-" if self.drain_s is None else f"{self.drain_s:.1f} s"
        return (
            f"chaos seed {self.seed}: {'passed' if self.passed else 'FAILED'}; {sum(self.kills.values())} kills, "
            f"{len(self.redis_stops)} Redis stops ({hows['shutdown']} shutdown, {hows['sigkill']} sigkill), "
            f"drained in {drain} (bound {DRAIN_BOUND_S:g} s), pending at end {self.pending_at_end}, "
            f"unread {self.unread_at_end}, dead letters {self.dead_letters}"
        )

    def write(self) -> None:
        FIGURES_DIR.mkdir(parents=True, exist_ok=True)
        (FIGURES_DIR / f"seed-{self.seed}.json").write_text(json.dumps(asdict(self), indent=2) + "\n")


class Chaos:
    """Kills a random service process every few seconds and once in every faulty step, each time starting a fresh
    one in its place; stops Redis as planned.

    A kill waits until the fresh process reads before the next fault (a service that cannot reach Redis while it
    starts exits, as it would under any supervisor); a Redis stop waits for that, and a kill for a Redis restart.
    """

    def __init__(self, stack, keys: Keys, start_service, processes: list, seed: int) -> None:
        self.stack, self.keys, self.start_service, self.processes = stack, keys, start_service, processes
        self.kill_rng = random.Random(f"{seed}-kills")
        self.step_kill_rng = random.Random(f"{seed}-step-kills")
        self.stops = plan_redis_stops(random.Random(f"{seed}-redis"))
        self.published = {step: asyncio.Event() for step in range(STEPS)}
        self.published_at: dict[int, float] = {}
        self.kills: collections.Counter[str] = collections.Counter()
        self.timed_kills = 0  # of the kills, those every few seconds (the others: one in each faulty step)
        self.last_fault = time.monotonic()
        self._one_at_a_time = asyncio.Lock()
        self._healing = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        kills = [self._kill_services(), self._kill_in_each_step()]
        self._tasks = [asyncio.create_task(c) for c in (*kills, self._stop_redis())]
        if LOSE_S:
            self._tasks.append(asyncio.create_task(self._watch_aof()))

    def step_published(self, step: int) -> None:
        self.published_at[step] = time.monotonic()
        self.published[step].set()

    async def heal(self) -> None:
        """No more kills but each faulty step's own; the planned Redis stops (all in earlier steps) finish."""
        self._healing.set()
        await asyncio.gather(*self._tasks)

    async def cancel(self) -> None:
        """Stop every fault now (the run failed), and leave Redis up for the suite's next tests."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.to_thread(self.stack.sh, "up", "redis")

    async def _kill_services(self) -> None:
        while not self._healing.is_set():
            try:
                await asyncio.wait_for(self._healing.wait(), self.kill_rng.uniform(*KILL_EVERY_S))
                return
            except TimeoutError:
                pass
            await self._kill(self.kill_rng)
            self.timed_kills += 1

    async def _kill_in_each_step(self) -> None:
        """One kill in every faulty step, so a quick run is as faulty as a slow one (the timed kills alone come
        fewer the faster the steps go)."""
        for step in range(FAULTY_STEPS):
            await self.published[step].wait()
            await asyncio.sleep(self.step_kill_rng.uniform(*KILL_IN_STEP_S))
            await self._kill(self.step_kill_rng)

    async def _kill(self, rng: random.Random) -> None:
        """SIGKILL a random service process, start a fresh one in its place in `processes` (so each killer's victims
        follow from its own rng, however the two interleave) and wait until it reads."""
        async with self._one_at_a_time:
            victim = rng.choice(self.processes)
            victim.kill()
            self.kills[victim.service] += 1
            self.last_fault = time.monotonic()
            fresh = self.start_service(victim.service, wait=False)
            self.processes[self.processes.index(victim)] = fresh
            await asyncio.to_thread(fresh.wait_consuming, self.stack.redis_url, self.keys)

    async def _stop_redis(self) -> None:
        for stop in self.stops:
            await self.published[stop.step].wait()
            await asyncio.sleep(max(0.0, self.published_at[stop.step] + stop.after_s - time.monotonic()))
            async with self._one_at_a_time:
                stop.at_s = time.monotonic() - self.published_at[stop.step]
                stop.blocked_in_xreadgroup = await blocked_in_xreadgroup(self.stack.redis_url)
                stopped_at = time.monotonic()
                await asyncio.to_thread(self.stack.sh, *(("down",) if stop.how == "shutdown" else ("kill",)), "redis")
                self.last_fault = time.monotonic()
                if stop.how == "sigkill" and LOSE_S:
                    stop.lost_bytes = self._lose_last_writes(stopped_at)
                await asyncio.sleep(stop.down_s)
                await asyncio.to_thread(self.stack.sh, "up", "redis")
                self.last_fault = time.monotonic()

    def _aof(self) -> Path:
        """The append-only file Redis writes to now: the newest incremental file of its manifest."""
        files = (self.stack.stack_dir / "redis" / "appendonlydir").glob("*.incr.aof")
        return max(files, key=lambda p: int(p.name.split(".")[-3]))

    async def _watch_aof(self) -> None:
        self._aof_sizes: collections.deque[tuple[float, Path, int]] = collections.deque(maxlen=100)
        while True:
            with contextlib.suppress(OSError, ValueError):
                aof = self._aof()
                self._aof_sizes.append((time.monotonic(), aof, aof.stat().st_size))
            await asyncio.sleep(0.05)

    def _lose_last_writes(self, killed_at: float) -> int:
        """Cut the AOF back to its size LOSE_S before the kill (a command cut in two is dropped at load:
        aof-load-truncated)."""
        aof = self._aof()
        then = [size for t, path, size in self._aof_sizes if path == aof and t <= killed_at - LOSE_S]
        if not then:
            return 0
        lost = aof.stat().st_size - then[-1]
        os.truncate(aof, then[-1])
        return lost


async def blocked_in_xreadgroup(redis_url: str) -> int:
    """How many clients Redis has blocked in XREADGROUP now (CLIENT LIST: cmd=xreadgroup, flag b)."""
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        listed = await client.client_list()
    finally:
        await client.aclose()
    return sum(c.get("cmd") == "xreadgroup" and "b" in c.get("flags", "") for c in listed)


@pytest.mark.timeout(1200)
async def test_a_run_under_random_kills_and_redis_stops_drains_and_loses_nothing_and_does_nothing_twice(
    stack, redis, keys, start_service
):
    figures = Figures(seed=SEED)
    rng = random.Random(f"{SEED}-rollouts")
    await configure_llm(stack, latency_ms=200, latency_jitter_ms=100)
    processes = [start_service(name, wait=False) for name in SERVICES for _ in range(2)]
    for process in processes:
        process.wait_consuming(stack.redis_url, keys)
    chaos = Chaos(stack, keys, start_service, processes, SEED)
    got: dict[str, Score] = {}
    began = time.monotonic()
    # The fixture's client predates the restarts.
    fresh = Redis.from_url(stack.redis_url, decode_responses=False)
    try:
        try:
            async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
                chaos.start()
                for step in range(STEPS):
                    if step == FAULTY_STEPS:
                        await chaos.heal()
                        figures.drain_s = await drain(fresh, keys, chaos.last_fault, FAULTY_STEPS, figures)
                    batch = step_rollouts(step, rng)
                    chaos.step_published(step)  # score() publishes at once
                    # A connection error reaching the trainer fails this test.
                    for score in await client.score(batch, timeout=180):
                        got[score.rollout_id] = score
                    await client.close_step(RUN, step, rollout_ids=[r.rollout_id for r in batch])
                    await client.wait_for_rubrics(RUN, step, timeout=180)
        finally:
            await chaos.cancel()
            await configure_llm(stack, latency_ms=0, latency_jitter_ms=0)
            figures.kills = dict(chaos.kills)
            figures.redis_stops = [asdict(s) for s in chaos.stops]
        # The healed steps settle as promptly.
        await drain(fresh, keys, time.monotonic(), STEPS, figures)
        figures.run_s = round(time.monotonic() - began, 1)
        await check_outcome(fresh, keys, got)
        dead = [p for p in chaos.processes if p.proc.poll() is not None]
        assert not dead, "\n".join(f"{p.consumer} exited:\n{p.log.read_text()[-2000:]}" for p in dead)
        assert chaos.timed_kills >= 1  # besides each faulty step's own kill
        hows = {s.how for s in chaos.stops if s.at_s is not None}
        assert len([s for s in chaos.stops if s.at_s is not None]) == REDIS_STOPS and hows == {"shutdown", "sigkill"}
        figures.passed = True
    except BaseException as e:
        figures.error = f"{type(e).__name__}: {e}"[:4000]
        raise
    finally:
        await fresh.aclose()
        figures.write()
        print(f"\n{figures.line()}")
        for stop in figures.redis_stops:
            print(
                f"  redis {stop['how']} in step {stop['step']} at +{stop['at_s'] or 0:.1f} s for "
                f"{stop['down_s']:.1f} s, {stop['blocked_in_xreadgroup']} clients blocked in XREADGROUP"
                + (f", {stop['lost_bytes']} AOF bytes cut" if LOSE_S else "")
            )
        for entry in figures.stuck:
            print(f"  stuck: {entry}")


async def drain(redis: Redis, keys: Keys, since: float, steps: int, figures: Figures) -> float:
    """Seconds from `since` until nothing is pending or unread in any group of the namespace and the first
    `steps` steps are summarized; fails past DRAIN_BOUND_S, with what each group still holds."""
    deadline = since + DRAIN_BOUND_S
    while True:
        groups = await namespace_groups(redis, keys)
        figures.pending_at_end = sum(g["pending"] for g in groups)
        figures.unread_at_end = sum(g["unread"] for g in groups)
        figures.dead_letters = await redis.xlen(keys.dead_letters)
        summarized = {e.step for e in await step_summarized(redis, keys)}
        drained = not figures.pending_at_end and not figures.unread_at_end and summarized >= set(range(steps))
        took = round(time.monotonic() - since, 1)
        if drained and took <= DRAIN_BOUND_S:
            return took
        if time.monotonic() > deadline:
            figures.stuck = await stuck_entries(redis, groups)
            raise AssertionError(
                f"not drained within {DRAIN_BOUND_S:g} s (drained: {drained}, after {took} s): "
                f"steps summarized {sorted(summarized)}; "
                f"groups {[g for g in groups if g['pending'] or g['unread']]}; pending entries {figures.stuck}"
            )
        await asyncio.sleep(0.5)


async def namespace_groups(redis: Redis, keys: Keys) -> list[dict[str, Any]]:
    """Every consumer group of every stream of the namespace: its pending count, and how many entries it has
    not read (XINFO's lag, or, where Redis cannot tell it, whether its last delivered id is the stream's last)."""
    out = []
    async for name in redis.scan_iter(match=f"{keys.namespace}:*", _type="STREAM", count=1000):
        stream = name.decode()
        for g in await redis.xinfo_groups(stream):
            unread = g["lag"]
            if unread is None:
                last = (await redis.xinfo_stream(stream))["last-generated-id"]
                unread = int(g["last-delivered-id"] != last)
            out.append({"stream": stream, "group": g["name"].decode(), "pending": g["pending"], "unread": unread})
    return out


async def stuck_entries(redis: Redis, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """XPENDING of each group with pending entries: which consumer holds what, idle how long, delivered how often."""
    out = []
    for g in groups:
        if g["pending"]:
            for p in await redis.xpending_range(g["stream"], g["group"], min="-", max="+", count=20):
                out.append(
                    {
                        "stream": g["stream"],
                        "group": g["group"],
                        "entry": p["message_id"].decode(),
                        "consumer": p["consumer"].decode(),
                        "idle_ms": p["time_since_delivered"],
                        "deliveries": p["times_delivered"],
                    }
                )
    return out


async def step_summarized(redis: Redis, keys: Keys) -> list[Event]:
    events = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    return [e for e in events if e.kind == EventKind.STEP_SUMMARIZED and e.run_id == RUN]


async def check_outcome(redis: Redis, keys: Keys, got: dict[str, Score]) -> None:
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
    dead = [wire.decode(wire.payload(f), DeadLetter) for _, f in await redis.xrange(keys.dead_letters)]
    assert not dead, dead[:5]
    # Every step summarized once, with every analysis.
    summarized = await step_summarized(redis, keys)
    assert sorted(e.step for e in summarized) == list(range(STEPS))
    assert all(e.fields["analyses"] == PER_STEP and e.fields["missing"] == 0 for e in summarized), summarized
    summaries = [wire.decode(wire.payload(f), StepSummary) for _, f in await redis.xrange(keys.summaries)]
    assert sorted(s.step for s in summaries) == list(range(STEPS))
    # Rubric versions contiguous, at most one a step.
    history = await RubricStore(redis, keys).history(RUN)
    assert [s.version for s in history] == list(range(1, len(history) + 1))
    made_from = [s.step for s in history[1:]]
    assert len(made_from) == len(set(made_from))


def table(figures_dir: Path = FIGURES_DIR) -> str:
    """The figures of every seed run, one row each (`make chaos` prints it)."""
    rows = [json.loads(p.read_text()) for p in sorted(figures_dir.glob("seed-*.json"))]
    rows.sort(key=lambda r: r["seed"])
    head = f"{'seed':>6} {'result':<7} {'kills':>5} {'shutdown':>8} {'sigkill':>7} {'drain s':>8} "
    head += f"{'pending':>7} {'unread':>6} {'dead':>4} {'run s':>6}"
    lines = [head]
    for r in rows:
        hows = collections.Counter(s["how"] for s in r["redis_stops"] if s["at_s"] is not None)
        drain = "-" if r["drain_s"] is None else f"{r['drain_s']:.1f}"
        lines.append(
            f"{r['seed']:>6} {'passed' if r['passed'] else 'FAILED':<7} {sum(r['kills'].values()):>5} "
            f"{hows['shutdown']:>8} {hows['sigkill']:>7} {drain:>8} {r['pending_at_end']!s:>7} "
            f"{r['unread_at_end']!s:>6} {r['dead_letters']!s:>4} {r['run_s']!s:>6}"
        )
        if not r["passed"]:
            lines.append(f"       {(r['error'] or '').splitlines()[0][:200]}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]) if len(sys.argv) > 1 else FIGURES_DIR))
