"""Benchmark: where rubricd's own cost goes, process by process and stage by stage (judge latency 0, cache off).

    make bench                                  # runs this after scoring.py
    .venv/bin/python tests/bench/cost.py --rollouts 2000 --concurrency 256

Starts its own Redis and LLM simulator (.stack/bench, as scoring.py) and one scorer with the judge cache off
(every rollout is judged), its stages stamped (tests/bench/stages.py). In the same run it prints:
  - CPU milliseconds per rollout of each process (the client, the scorer, Redis; the simulator beside), from the
    processes' own CPU counters, for R rollouts at C in flight and for rollouts one at a time (C=1), median of
    `--rounds`; and rollouts per scorer CPU-second;
  - the added time per rollout at C=1 (through rubricd against the same judge call made directly, paired), p50
    and p99;
  - one rollout's wall time by stage at C=1 (client encode and XADD, scorer wake-up and read, decode, rubric set,
    stored-answer read, judge call, commit, reply read, client decode), medians;
  - a profile of the scorer under load (py-spy, sampling the running process) as a flame graph:
    reports/bench-<time>/scorer.svg.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import openai
import psutil
import redis as redis_sync
import stages
from redis.asyncio import Redis
from scoring import (
    ENV,
    LLM_URL,
    NAMESPACE,
    REDIS_URL,
    REPO,
    STACK,
    groups,
    judging_directly,
    machine,
    pct,
    rollouts,
    scorer_env,
)

from rubricd import RubricdClient
from rubricd.messages import Function, FunctionSpec, Rollout, Tool, ToolCall, Turn


def processes(stack: Path, scorer: int) -> dict[str, list[psutil.Process]]:
    """The processes whose CPU is counted: this one (the client), the scorer, Redis, the simulator's tree."""
    simulator = psutil.Process(int((stack / "run/simulator.pid").read_text()))
    return {
        "client": [psutil.Process()],
        "scorer": [psutil.Process(scorer)],
        "redis": [psutil.Process(int((stack / "run/redis.pid").read_text()))],
        "simulator": [simulator, *simulator.children(recursive=True)],
    }


def cpu(procs: dict[str, list[psutil.Process]]) -> dict[str, float]:
    """CPU seconds (user + system) of each group of processes so far."""
    return {name: sum(sum(p.cpu_times()[:2]) for p in group) for name, group in procs.items()}


@contextmanager
def counted(procs: dict[str, list[psutil.Process]], n: int, into: dict[str, list[float]]) -> Iterator[None]:
    """Add each group's CPU milliseconds per rollout over the block (n rollouts) to `into`."""
    before = cpu(procs)
    yield
    after = cpu(procs)
    for name in procs:
        into.setdefault(name, []).append((after[name] - before[name]) * 1000 / n)


async def score(client: RubricdClient, batch: list, concurrency: int) -> float:
    """Score `batch` with `concurrency` in flight; the wall time."""
    queue = list(reversed(batch))

    async def worker() -> None:
        while queue:
            await client.score_one(queue.pop(), timeout=120)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def trajectories(run_id: str, n: int, tool_calls: int = 4) -> list[Rollout]:
    """N trajectories of 2 + 2 x `tool_calls` turns (10 by default): a question, calculator calls and their
    results, the answer."""
    calc = [Tool(function=FunctionSpec(name="calc", description="evaluates arithmetic"))]
    batch = []
    for i in range(n):
        turns = [Turn(role="user", content=f"What is {i} + {i}, tripled, then squared?")]
        for k in range(tool_calls):
            call = ToolCall(id=f"c{k}", function=Function(name="calc", arguments=f'"{i}+{i}+{k}"'))
            turns += [
                Turn(role="assistant", tool_calls=[call]),
                Turn(role="tool", tool_call_id=f"c{k}", content=str(k)),
            ]
        turns.append(Turn(role="assistant", content=f"It is {(6 * i) ** 2}."))
        batch.append(Rollout(run_id=run_id, rollout_id=f"t{i}", step=0, trajectory=turns, tools=calc, prompt_turns=1))
    return batch


# What is measured: a label, the rollouts (run id, n), how many in flight (None: the bench's C).
KINDS: tuple[tuple[str, Callable[[str, int], list[Rollout]], int | None], ...] = (
    ("text", rollouts, None),
    ("text", rollouts, 1),
    ("trajectory, 10 turns", trajectories, None),
    ("group of 8", lambda run_id, n: groups(run_id, n, 8, "group"), None),
)


async def per_process(procs: dict[str, list[psutil.Process]], n: int, concurrency: int, rounds: int) -> None:
    print(f"\n== CPU per rollout by process, L=0, judge cache off (median of {rounds} rounds), ms")
    print(
        f"{'':32} {'client':>7} {'scorer':>7} {'redis':>7} {'simulator':>9} {'rollouts/s':>10} {'per scorer CPU-s':>16}"
    )
    async with RubricdClient(REDIS_URL, namespace=NAMESPACE) as client:
        for label, make, c in KINDS:
            c = c or concurrency
            size = n if c > 1 else min(n, 500)
            measured: dict[str, list[float]] = {}
            rates = []
            for k in range(rounds):
                batch = make(f"cpu-{label[:4]}-c{c}-{k}", size)
                with counted(procs, size, measured):
                    rates.append(size / await score(client, batch, c))
            m = {name: statistics.median(values) for name, values in measured.items()}
            print(
                f"{f'{label}, R={size} C={c}':32} {m['client']:7.3f} {m['scorer']:7.3f} {m['redis']:7.3f} "
                f"{m['simulator']:9.3f} {statistics.median(rates):10.0f} {1000 / m['scorer']:16.0f}"
            )


async def floor(n: int = 2000) -> None:
    """What one redis-py command and one judge call through the openai client cost this process in CPU, one at a
    time: the floor under a rollout's cost (the scorer makes a read, an MGET and a commit and one judge call); and
    the scorer's POST through the openai client against the same POST with aiohttp alone."""
    me = psutil.Process()
    redis = Redis.from_url(REDIS_URL)

    async def per_call(name: str, call: Callable[[int], Awaitable[object]], times: int) -> None:
        """Print the CPU this process spent on each of `times` calls, one at a time."""
        started = sum(me.cpu_times()[:2])
        for i in range(times):
            await call(i)
        print(f"{name:42} {(sum(me.cpu_times()[:2]) - started) / times * 1e6:8.0f}")

    print("\n== the floor: CPU of one call in this process, one at a time, microseconds")
    await per_call("redis-py GET", lambda _: redis.get("floor"), n)
    await per_call("redis-py XADD", lambda _: redis.xadd("floor", {"x": b"x" * 300}, maxlen=100), n)
    await redis.delete("floor")
    await redis.aclose()
    batch = rollouts("floor", min(n, 300))
    async with judging_directly(1) as call:
        await per_call("a judge call with the openai client (httpx)", lambda i: call(batch[i]), len(batch))
    # The scorer's own way (the openai client over aiohttp, a timeout per call, its reply as bytes) against aiohttp
    # alone: the same judge-sized request, so the difference is what the openai client's handling costs.
    system = {"role": "system", "content": "Judge the answer. " * 60}
    user = {"role": "user", "content": "The prompt and the response. " * 30}
    body: dict[str, object] = {"model": "rubricd-simulator", "messages": [system, user]}
    client = openai.AsyncOpenAI(
        base_url=LLM_URL, api_key="bench", max_retries=0, http_client=openai.DefaultAioHttpClient()
    )
    async with client, aiohttp.ClientSession() as session:
        for name, post in (
            (
                "a POST through the openai client (aiohttp)",
                lambda _: client.post("/chat/completions", cast_to=bytes, body=body, options={"timeout": 60}),
            ),
            ("the same POST with aiohttp alone", lambda _: aiohttp_post(session, body)),
        ):
            await post(0)  # the connection opened before the clock starts
            await per_call(name, post, len(batch))


async def aiohttp_post(session: aiohttp.ClientSession, body: dict[str, object]) -> bytes:
    async with session.post(f"{LLM_URL}/chat/completions", json=body) as response:
        response.raise_for_status()
        return await response.read()


async def added(n: int) -> None:
    """C=1: each rollout's direct judge call and its trip through rubricd, one after the other (paired, so that a
    busy spell weighs on both)."""
    extra, trips = [], []
    async with judging_directly(1) as call, RubricdClient(REDIS_URL, namespace=NAMESPACE) as client:
        for rollout in rollouts(f"added-{time.monotonic_ns()}", n):
            started = time.perf_counter()
            await call(rollout)
            directly = time.perf_counter() - started
            started = time.perf_counter()
            await client.score_one(rollout, timeout=60)
            trips.append(time.perf_counter() - started)
            extra.append((trips[-1] - directly) * 1000)
    print(f"\n== added time per rollout, C=1, L=0, judge cache off: {n} rollouts, each paired with its direct call")
    print(
        f"p50 {pct(extra, 50):.2f} ms, p99 {pct(extra, 99):.2f} ms (the trip through rubricd: p50 "
        f"{pct(trips, 50) * 1000:.2f} ms, p99 {pct(trips, 99) * 1000:.2f} ms)"
    )


async def stamped(n: int) -> list[tuple[str, str, int]]:
    """C=1 through the stamped scorer, the client stamped too: the client's stamps."""
    client_stamps = stages.Stamps()
    stages.instrument_client(client_stamps)
    async with RubricdClient(REDIS_URL, namespace=NAMESPACE) as client:
        for rollout in rollouts(f"stages-{time.monotonic_ns()}", n):
            stages.current.set(rollout.rollout_id)
            client_stamps.stamp("client_start")
            await client.score_one(rollout, timeout=60)
            client_stamps.stamp("client_end")
    return client_stamps.rows


def stage_table(client_rows: list, scorer_rows: list) -> None:
    found = stages.by_rollout(client_rows)
    for rollout_id, named in stages.by_rollout(scorer_rows).items():
        found.setdefault(rollout_id, {}).update(named)
    complete = [s for s in found.values() if all(k in s for _, a, b in stages.STAGES + stages.GAPS for k in (a, b))]
    print(f"\n== one rollout's wall time by stage, C=1 (medians over {len(complete)} rollouts), microseconds")
    total = [(s["client_end"] - s["client_start"]) / 1000 for s in complete]
    for name, start, end in stages.STAGES + stages.GAPS:
        values = [(s[end] - s[start]) / 1000 for s in complete]
        print(f"{name:42} {statistics.median(values):8.0f}")
    print(f"{'the whole trip':42} {statistics.median(total):8.0f}")


def profile(pid: int, seconds: float, out: Path, fmt: str) -> subprocess.Popen | None:
    """py-spy sampling the scorer for `seconds` into `out` (`fmt`: flamegraph, raw), or None, said why."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        print("no profile: py-spy is not installed (make install installs it)")
        return None
    options = f"--pid {pid} --duration {int(seconds)} --rate 250 --nonblocking --format {fmt} --output {out}"
    return subprocess.Popen([spy, "record", *options.split()], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


# Who a sample's time is charged to: the innermost of its frames in one of these (by a part of the frame's file
# path), so that a socket write or a JSON encoder counts for the library that called it.
PARTS = (
    ("the openai client", ("openai/",)),
    ("HTTP (httpx, aiohttp)", ("httpx/", "httpcore/", "aiohttp/", "h11/")),
    ("redis-py", ("redis/",)),
    ("FastStream", ("faststream/", "fast_depends/", "anyio/")),
    ("msgspec", ("msgspec/",)),
    ("pydantic", ("pydantic",)),
    ("prometheus_client", ("prometheus_client/",)),
    ("rubricd", ("rubricd_services/", "rubricd/")),
)


def charged(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, marks in PARTS:
            if any(mark in frame for mark in marks):
                return name
    return "the event loop, the rest"


def where(raw: Path, top: int = 10) -> None:
    """The profile's samples (py-spy leaves out idle threads) charged to the innermost library of their stack, and
    the hottest leaf functions."""
    by_part: dict[str, int] = {}
    by_leaf: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, n = stack.split(";"), int(count)
        total += n
        part = charged(frames)
        by_part[part] = by_part.get(part, 0) + n
        by_leaf[frames[-1]] = by_leaf.get(frames[-1], 0) + n
    print(f"\n== the scorer's {total} busy samples, charged to the innermost library in their stack")
    for part, n in sorted(by_part.items(), key=lambda kv: -kv[1]):
        print(f"{part:28} {100 * n / total:5.1f}%")
    print("hottest leaf functions:")
    for leaf, n in sorted(by_leaf.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{100 * n / total:5.1f}%  {leaf[:110]}")


def start_scorer(env: dict[str, str], stamps: Path | None = None) -> subprocess.Popen:
    """A scorer process; with `stamps`, its stages stamped into that file (tests/bench/stages.py)."""
    if stamps is None:
        return subprocess.Popen([sys.executable, "-m", "rubricd_services.cli", "serve", "scorer"], env=env)
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("stages.py")), str(stamps)], env=env)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=30)


async def warm_up() -> None:
    async with RubricdClient(REDIS_URL, namespace=NAMESPACE) as client:
        await score(client, rollouts(f"warmup-{time.monotonic_ns()}", 100), 50)


async def under_profile(pid: int, seconds: float, concurrency: int, out: Path) -> None:
    """Load the scorer at `concurrency` while py-spy samples it: a flame graph (scorer.svg) and the samples
    summed by library (from scorer.txt, the same kind of samples as collapsed stacks)."""
    spies = [profile(pid, seconds, out / "scorer.svg", "flamegraph"), profile(pid, seconds, out / "scorer.txt", "raw")]
    async with RubricdClient(REDIS_URL, namespace=NAMESPACE) as client:
        started, k = time.monotonic(), 0
        while time.monotonic() - started < seconds + 1:
            await score(client, rollouts(f"profile-{k}", 500), concurrency)
            k += 1
    for spy in spies:
        if spy is not None and spy.wait(timeout=60) != 0:
            assert spy.stderr is not None
            print(f"\nno profile: py-spy failed: {spy.stderr.read().decode().strip()[-300:]}")
            return
    if all(spies):
        print(f"\nflame graph of the scorer under load (C={concurrency}, L=0): {out / 'scorer.svg'}")
        where(out / "scorer.txt")


async def main(args: argparse.Namespace) -> None:
    stack = Path(ENV["RUBRICD_STACK_DIR"])
    env = {**os.environ, **ENV, "RUBRICD_SIM_WORKERS": str(args.simulator_workers)}
    subprocess.run([str(STACK), "up", "redis", "simulator"], env=env, check=True)
    out = args.reports / time.strftime("bench-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    settings = scorer_env(env, args.concurrency, RUBRICD_JUDGE_CACHE_TTL_S="0")  # every rollout judged
    redis_sync.Redis.from_url(REDIS_URL).flushdb()
    stamps = out / "stamps.jsonl"
    try:
        scorer = start_scorer(settings)
        try:
            await asyncio.sleep(3)
            await warm_up()
            print(f"{os.cpu_count()} CPUs; simulator: {args.simulator_workers} worker process(es); one scorer process")
            print(machine())
            await per_process(processes(stack, scorer.pid), args.rollouts, args.concurrency, args.rounds)
            await added(args.serial)
            await floor()
            await under_profile(scorer.pid, args.profile_s, args.concurrency, out)
        finally:
            stop(scorer)
        scorer = start_scorer(settings, stamps)  # stamped: its stages, one rollout at a time
        try:
            await asyncio.sleep(3)
            await warm_up()
            client_rows = await stamped(args.serial)
        finally:
            stop(scorer)
    finally:
        subprocess.run([str(STACK), "down"], env=env, check=False)
    scorer_rows = [tuple(json.loads(line)) for line in stamps.read_text().splitlines()]
    stage_table(client_rows, scorer_rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serial", type=int, default=300, help="rollouts one at a time for the added time and stages")
    parser.add_argument("--profile-s", type=float, default=10)
    parser.add_argument("--simulator-workers", type=int, default=max(1, (os.cpu_count() or 1) // 4))
    parser.add_argument("--reports", type=Path, default=REPO / "reports")
    asyncio.run(main(parser.parse_args()))
