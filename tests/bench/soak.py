"""Soak: a long run of the whole memory loop, and whether step N costs what step 1 cost.

    make soak                                   # 300 steps x 8 rollouts in groups of 4: about 40 minutes on 2 cores
    make soak SOAK="--retention-steps 20 --runs 0"  # analyses kept 20 steps; no many-runs check
    .venv/bin/python tests/bench/soak.py --steps 3000 --rollouts 16 --group-size 4 --latency-ms 200

Starts its own stack (.stack/soak, own ports): Redis, Weaviate, the LLM simulator (a test tool; its judge latency
--latency-ms, default 0), the scorers (--scorers, one), comparer, arm, gateway, summarizer, updater, the analyzers
(--analyzers, two), and the dashboard.
The demo's trainer (demo.trainer.one_step, its simulated policy) publishes each step's rollouts in sample groups,
closes the step and waits for its rubric update; after each step the soak records:

- publish-to-score latency p50/p99 (each Score's scored_at against the publish);
- step close to its summary (the summarizer's event) and to its rubric update (the trainer's wait);
- the prompt tokens of each agent in the step (judge, analyzer, summarizer, query writer, updater);
- the rubric set's size and version;
- Redis's used_memory and its keys by family (the key's second part: `<ns>:<family>:...`), and the commands and
  network bytes it served in the step (every client's: the trainer's and the services');
- Weaviate's objects (its shards' statistics) and its process's RSS, the updater's memory retrieval (its event's
  retrieval_ms);
- each service's RSS and the CPU milliseconds it spent on the step (the soak's own reads below are left out);
- how long `rubricd status`, `rubricd rubrics health RUN --step S` and the dashboard's API (the runs list and the
  run's view) take to answer, the median of three (the commands run in this process: no interpreter start-up
  counted).

Then the many-runs check: one small run alone (K steps of one sample group, each closed and waited on, as a
synchronous trainer does), then --runs of them at once (a client each, as separate trainers), then --idle-runs
more runs of one evaluation rollout each, so that Redis holds that many runs' keys, and `rubricd status` and the
dashboard's runs list timed over them (median of five).

It writes reports/soak-<time>/: soak.json (every step's figures), a PNG per group of figures, and report.md with the
growth table: each figure's mean over the run's last tenth against its first tenth, of the steps after the rubric
set has reached its final size (and with retention, after every kind it names has begun to forget). A per-step
figure is flat when that ratio is at most 1.10, grows when it is beyond that by more than the steps' noise, else is
unresolved; a memory figure (Redis, Weaviate, RSS) should plateau, or grow only with what the run keeps: the table
gives its growth per step over the second half.
Not part of `make test`: it is a benchmark, and prints its figures.
"""

import argparse
import asyncio
import contextlib
import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import matplotlib
import msgspec
import psutil
from redis.asyncio import Redis

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rubricd import RubricdClient, wire
from rubricd.keys import Keys
from rubricd.messages import Event
from rubricd_services.cli.__main__ import main as cli
from rubricd_services.dashboard.reader import Reader
from rubricd_services.memory.embedder import make_embedder
from rubricd_services.memory.store import Memory
from rubricd_services.settings import ServiceSettings, load
from rubricd_services.state import usage
from rubricd_testbed.demo.policy import Policy
from rubricd_testbed.demo.trainer import TASKS, Announcements, Run, StepRecord, one_step

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "deploy/local/stack.sh"
PORTS = {
    "RUBRICD_REDIS_PORT": 6395,
    "RUBRICD_WEAVIATE_PORT": 8085,
    "RUBRICD_WEAVIATE_GRPC_PORT": 30055,
    "RUBRICD_SIMULATOR_PORT": 8094,
    "RUBRICD_METRICS_BASE_PORT": 9500,
}
DASHBOARD_PORT = 9490
NAMESPACE = "soak"
STACK_ENV = {
    "RUBRICD_STACK_DIR": str(REPO / ".stack/soak"),
    **{k: str(v) for k, v in PORTS.items()},
    "RUBRICD_NAMESPACE": NAMESPACE,
    "RUBRICD_LOG_LEVEL": "WARNING",
}
# Where this process (the trainer, the commands it times) finds the stack.
ENV = {
    **STACK_ENV,
    "RUBRICD_REDIS_URL": f"redis://127.0.0.1:{PORTS['RUBRICD_REDIS_PORT']}/0",
    "RUBRICD_WEAVIATE_URL": f"http://127.0.0.1:{PORTS['RUBRICD_WEAVIATE_PORT']}",
    "RUBRICD_LLM__BASE_URL": f"http://127.0.0.1:{PORTS['RUBRICD_SIMULATOR_PORT']}/v1",
}
FLAT = 1.10  # a per-step figure's last tenth / first tenth at most this
# What the soak records of a step, by kind: per-step figures must stay flat; memory figures may grow with what
# the run keeps. (A figure's name, its group's PNG.)
PER_STEP = "per step"
MEMORY = "memory"


def percentile(values: list[float], q: float) -> float:
    """The q-th quantile (0..1) of `values`, by the nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def tenths(values: list[float]) -> tuple[list[float], list[float]]:
    """The first and the last tenth of a run's values (at least one value each; a step without the figure, NaN, is
    passed over)."""
    n, known = max(1, len(values) // 10), [v for v in values if not math.isnan(v)] or [0.0]
    return known[:n], known[-n:]


def noise(first: list[float], last: list[float]) -> float:
    """Twice the standard error of the last tenth's mean less FLAT times the first's: how far from the 1.10 line
    the steps' scatter alone can put a figure (a CPU figure of a few ms a step, read in 10 ms clock ticks; a read's
    time on a busy machine)."""
    if min(len(first), len(last)) < 2:
        return 0.0
    return 2 * math.sqrt(statistics.variance(last) / len(last) + FLAT**2 * statistics.variance(first) / len(first))


def warmup(retention: str, steps: list[dict[str, Any]]) -> int:
    """The steps before the run is in its steady state, left out of the growth table: those before the rubric set
    reached the size it keeps to the end (the judge's and the analyzer's prompts carry every rubric, and the demo's
    policy finds its hacks over the run's first third: the set grows with them), and with retention, those before
    every kind named has begun to forget (the most steps any keeps). None left out where fewer than 100 steps would
    remain."""
    settled = len(steps)
    while settled and steps[settled - 1]["rubrics"] == steps[-1]["rubrics"]:
        settled -= 1
    kept = max(json.loads(retention).values(), default=0) if retention else 0
    skip = max(settled, kept)
    return skip if len(steps) - skip >= 100 else 0


def slope(values: list[float]) -> float:
    """Growth per step over the second half of the run (least squares)."""
    half = [v for v in values[len(values) // 2 :] if not math.isnan(v)]
    if len(half) < 2:
        return 0.0
    xs = range(len(half))
    mx, my = statistics.fmean(xs), statistics.fmean(half)
    return sum((x - mx) * (y - my) for x, y in zip(xs, half, strict=True)) / sum((x - mx) ** 2 for x in xs)


class Stack:
    """The soak's own stack (deploy/local/stack.sh with the soak's directory and ports) and its dashboard."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.env = {
            **os.environ,
            **STACK_ENV,
            "RUBRICD_SIM_LATENCY_MS": f"{args.latency_ms:g}",
            "RUBRICD_SCORER_WORKERS": str(args.scorers),
            "RUBRICD_ANALYZER_WORKERS": str(args.analyzers),
        }
        if args.retention:
            self.env["RUBRICD_MEMORY_KEEP_STEPS"] = args.retention  # the summarizer's
        if args.churn:
            self.env["RUBRICD_SIM_CHURN"] = "1"
        self.dir = Path(STACK_ENV["RUBRICD_STACK_DIR"])
        self.dashboard: subprocess.Popen[bytes] | None = None

    def up(self) -> None:
        subprocess.run([str(STACK), "down"], env=self.env, check=False, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)  # every soak starts from empty data
        subprocess.run([str(STACK), "up", "redis", "weaviate", "simulator", "services"], env=self.env, check=True)
        with (self.dir / "logs").joinpath("dashboard.log").open("ab") as log:
            self.dashboard = subprocess.Popen(
                [sys.executable, "-m", "rubricd_services.cli", "serve", "dashboard", "--port", str(DASHBOARD_PORT)],
                env={**self.env, **ENV},
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while not self.answers("/api/runs"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dashboard did not answer on {DASHBOARD_PORT}: {self.dir}/logs/dashboard.log")
            time.sleep(0.5)

    def down(self) -> None:
        if self.dashboard is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.dashboard.pid, 15)
            self.dashboard.wait(timeout=30)
        subprocess.run([str(STACK), "down"], env=self.env, check=False)

    def answers(self, path: str) -> Any:
        """The dashboard's JSON answer to `path` (None if it did not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{DASHBOARD_PORT}{path}", timeout=30) as r:
                return json.loads(r.read()) if r.status == 200 else None
        except OSError:
            return None

    def processes(self) -> dict[str, psutil.Process]:
        """The stack's processes by name (their pid files), the dashboard's too."""
        found = {}
        for pidfile in sorted((self.dir / "run").glob("*.pid")):
            with contextlib.suppress(ValueError, psutil.Error):
                found[pidfile.stem] = psutil.Process(int(pidfile.read_text()))
        if self.dashboard is not None:
            found["dashboard"] = psutil.Process(self.dashboard.pid)
        return found


def timed(fn: Callable[[], object], times: int = 3) -> float:
    """The median seconds of `times` calls of `fn` (one read is noise on a busy machine)."""
    took = []
    for _ in range(times):
        started = time.perf_counter()
        fn()
        took.append(time.perf_counter() - started)
    return statistics.median(took)


def command(argv: list[str]) -> str:
    """Run a `rubricd` command here and return what it printed; a command that fails stops the soak."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(argv)
    if code:
        raise RuntimeError(f"rubricd {' '.join(argv)} exited {code}")
    return out.getvalue()


async def key_families(redis: Redis) -> dict[str, int]:
    """Redis's keys by family: the part after the namespace (`soak:score:run:r1` -> `score`)."""
    families: dict[str, int] = {}
    async for raw in redis.scan_iter(count=1000):
        parts = raw.decode().split(":")
        family = parts[1] if len(parts) > 1 and parts[0] == NAMESPACE else parts[0]
        families[family] = families.get(family, 0) + 1
    return families


async def objects(memory: Memory) -> int:
    """Weaviate's objects in the memory's collection: an aggregate without a filter, which Weaviate answers from
    its index's count (a run's filtered count would scan, and be part of what is measured)."""
    found = await memory.collection.aggregate.over_all(total_count=True)
    return found.total_count or 0


async def step_events(redis: Redis, run_id: str, step: int) -> dict[str, Event]:
    """The summarizer's and the updater's events of one step, from the newest events."""
    found: dict[str, Event] = {}
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await redis.xrevrange(f"{NAMESPACE}:events", count=500))
    for _, fields in entries:
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            event = wire.decode(wire.payload(fields), Event)
            if event.run_id == run_id and event.step == step and event.service in ("summarizer", "updater"):
                found.setdefault(event.service, event)
    return found


async def idle(processes: dict[str, psutil.Process], seconds: float) -> dict[str, float]:
    """Each process's CPU milliseconds a second over `seconds` with nothing to do: what it costs however few
    rollouts it serves (its polls: blocking reads, reclaims, metrics), the part of a step's CPU that is not the
    step's rollouts'."""
    before = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
    await asyncio.sleep(seconds)
    return {name: (sum(p.cpu_times()[:2]) - before[name]) * 1000 / seconds for name, p in processes.items()}


class Soak:
    """One run of S steps, measured after each."""

    def __init__(self, args: argparse.Namespace, stack: Stack) -> None:
        self.args, self.stack = args, stack
        self.run = Run(
            run_id=f"soak-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}",
            steps=args.steps,
            rollouts=args.rollouts,
            seed=7,
            learning_rate=1.0,
            namespace=NAMESPACE,
            started_at=time.time(),
            start=dict(TASKS["amaris"].start),
            group_size=args.group_size,
        )
        self.steps: list[dict[str, Any]] = []
        self.idle: dict[str, float] = {}  # process -> CPU ms a second before the run (its fixed cost: polling)
        self._at = 0.0  # when the step's CPU started counting
        self.many: dict[str, Any] | None = None
        self._tokens: dict[str, int] = {}
        self._cpu: dict[str, float] = {}
        self._redis: dict[str, int] = {}
        self._cursor = ""  # the dashboard's, from its last run view

    async def go(self) -> None:
        settings = load(ServiceSettings)
        memory = await Memory.connect(settings, make_embedder(settings, None))
        processes = self.stack.processes()
        self.idle = await idle(processes, self.args.idle_s)
        self._cpu = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
        self._at = time.monotonic()
        run = self.run
        policy = Policy(run.steps, seed=run.seed, learning_rate=run.learning_rate, start=dict(run.start), task=run.task)
        try:
            async with RubricdClient(ENV["RUBRICD_REDIS_URL"], namespace=NAMESPACE) as client:
                announcements = Announcements(client.redis, client.keys, run.run_id)
                await announcements.start()
                for step in range(run.steps):
                    record = await one_step(client, announcements, policy, run, step, timeout=300)
                    figures = await self.measure(client, memory, processes, record)
                    self.steps.append(figures)
                    if step % 10 == 0 or step == run.steps - 1:
                        print(
                            f"step {step}: score p50 {figures['score_p50_ms']:.0f} ms, close to update "
                            f"{figures['close_to_update_s']:.2f} s, rubrics v{figures['rubric_version']} "
                            f"({figures['rubrics']}), Redis {figures['redis_used_mb']:.1f} MB, Weaviate objects "
                            f"{figures['memories']}",
                            flush=True,
                        )
        finally:
            await memory.close()

    async def measure(
        self, client: RubricdClient, memory: Memory, processes: dict[str, psutil.Process], record: StepRecord
    ) -> dict[str, Any]:
        run_id, redis = self.run.run_id, client.redis
        # The step's Redis traffic (every client's) and each process's CPU first: the reads below are the soak's,
        # not the step's (None at the first step: no start to count from).
        traffic = await redis_traffic(redis)
        sent = {k: v - self._redis[k] if self._redis else None for k, v in traffic.items()}
        wall_s = time.monotonic() - self._at
        cpu, rss = {}, {}
        for name, p in processes.items():
            with contextlib.suppress(psutil.Error):
                used = sum(p.cpu_times()[:2])
                cpu[name] = (used - self._cpu.get(name, used)) * 1000
                self._cpu[name] = used
                rss[name] = p.memory_info().rss / 2**20
        latencies = [s * 1000 for s in record.score_latencies]
        events = await step_events(redis, run_id, record.step)
        summarized = events.get("summarizer")
        updated = events.get("updater")
        spent = {u.agent: u.prompt_tokens for u in await usage.read(redis, client.keys, run_id)}
        tokens = {agent: n - self._tokens.get(agent, 0) for agent, n in spent.items()}
        self._tokens = spent
        current = await client.rubrics.current(run_id)
        info = await redis.info("memory")
        retrieval = updated.fields.get("retrieval_ms") if updated else None
        figures = {
            "step": record.step,
            "score_p50_ms": percentile(latencies, 0.5),
            "score_p99_ms": percentile(latencies, 0.99),
            "close_to_summary_s": summarized.at - record.closed_at if summarized else None,
            "close_to_update_s": record.updated_at - record.closed_at,
            "tokens": tokens,
            "rubrics": len(current.rubrics) if current else 0,
            "rubric_version": current.version if current else 0,
            "redis_used_mb": int(info["used_memory"]) / 2**20,
            "redis_commands": sent["commands"],
            "redis_kb": sent["bytes"] / 1000 if sent["bytes"] is not None else None,
            "redis_keys": await key_families(redis),
            "memories": await objects(memory),
            "retrieval_ms": float(retrieval) if isinstance(retrieval, int | float) else None,
            "cpu_ms": cpu,
            "wall_s": wall_s,  # the step's, from the last step's reads to this one's: what its CPU was spent in
            "rss_mb": rss,
            "status_s": await asyncio.to_thread(timed, lambda: command(["status", "--json"])),
            "health_s": await asyncio.to_thread(
                timed, lambda: command(["rubrics", "health", run_id, "--step", str(record.step), "--json"])
            ),
            "dashboard_runs_s": await asyncio.to_thread(timed, lambda: self.stack.answers("/api/runs")),
            "dashboard_run_s": await asyncio.to_thread(timed, lambda: self.poll(f"/api/runs/{run_id}")),
        }
        for name, p in processes.items():  # the next step's CPU counts from here: the reads above are not its
            with contextlib.suppress(psutil.Error):
                self._cpu[name] = sum(p.cpu_times()[:2])
        self._redis = await redis_traffic(redis)  # and its Redis commands
        self._at = time.monotonic()  # as its CPU: the reads' time is not the next step's
        return figures

    def poll(self, path: str) -> None:
        """The run view as the page polls it: with the cursor of its last answer (only the steps that changed)."""
        answer = self.stack.answers(f"{path}?{urllib.parse.urlencode({'cursor': self._cursor})}")
        self._cursor = answer["cursor"] if answer else ""


async def redis_traffic(redis: Redis) -> dict[str, int]:
    """Redis's commands and network bytes (in and out) since it started, every client's."""
    stats = await redis.info("stats")
    return {
        "commands": int(stats["total_commands_processed"]),
        "bytes": int(stats["total_net_input_bytes"]) + int(stats["total_net_output_bytes"]),
    }


async def small_run(run_id: str, steps: int, rollouts: int) -> list[float]:
    """A synchronous trainer's run of `steps` steps of one sample group: each step's seconds from publish to its
    rubric update in place."""
    policy = Policy(steps, seed=sum(map(ord, run_id)), task=TASKS["amaris"])
    took = []
    async with RubricdClient(ENV["RUBRICD_REDIS_URL"], namespace=NAMESPACE) as client:
        for step in range(steps):
            started = time.monotonic()
            batch = [r for _, r in policy.sample(run_id, step, rollouts, group_size=rollouts)]
            await client.score(batch, timeout=1800)
            await client.close_step(run_id, step, rollouts=len(batch))
            await client.wait_for_rubrics(run_id, step, timeout=1800)
            took.append(time.monotonic() - started)
    return took


async def idle_runs(n: int) -> None:
    """`n` runs of one evaluation rollout each (scored, not analysed): their rubric sets, scores, kept rollouts and
    usage in Redis, as finished runs leave them."""
    async with RubricdClient(ENV["RUBRICD_REDIS_URL"], namespace=NAMESPACE) as client:
        for start in range(0, n, 100):
            batch = [
                msgspec.structs.replace(r, evaluation=True)
                for i in range(start, min(n, start + 100))
                for _, r in Policy(1, seed=i, task=TASKS["amaris"]).sample(f"idle-{i:04d}", 0, 1)
            ]
            await client.score(batch, timeout=1800)


async def many_runs(args: argparse.Namespace, stack: Stack) -> dict[str, Any]:
    """The many-runs check: one run alone, then `args.runs` at once; then `rubricd status` over all the runs."""
    k, g = args.run_steps, args.group_size
    print(f"many runs: one run of {k} steps x {g} rollouts alone, then {args.runs} at once", flush=True)
    started = time.monotonic()
    alone = await small_run("alone", k, g)
    alone_s = time.monotonic() - started
    started = time.monotonic()
    together = await asyncio.gather(*(small_run(f"many-{i:03d}", k, g) for i in range(args.runs)))
    together_s = time.monotonic() - started
    per_run = sorted(sum(t) for t in together)
    steps = [s for t in together for s in t]
    print(f"many runs: {args.idle_runs} idle runs more, then rubricd status over them all", flush=True)
    await idle_runs(args.idle_runs)
    listed = len(json.loads(await asyncio.to_thread(command, ["status", "--json"]))["rubrics"])
    return {
        "runs": args.runs,
        "steps_per_run": k,
        "rollouts_per_step": g,
        "alone_step_p50_s": statistics.median(alone),
        "alone_steps_per_s": k / alone_s,
        "together_step_p50_s": statistics.median(steps),
        "together_step_p99_s": percentile(steps, 0.99),
        "together_steps_per_s": len(steps) / together_s,
        "slowest_over_median_run": per_run[-1] / statistics.median(per_run),
        "runs_listed": listed,
        "status_s": await asyncio.to_thread(timed, lambda: command(["status", "--json"]), 5),
        "dashboard_runs_s": await dashboard_list_s(),
    }


async def dashboard_list_s(times: int = 5) -> float:
    """The dashboard's read of its run list (what /api/runs answers from, read again every 15 s), median."""
    settings = load(ServiceSettings)
    async with Redis.from_url(settings.redis_url) as redis:
        reader = Reader(settings, Keys(NAMESPACE), redis)
        took = []
        for _ in range(times):
            started = time.perf_counter()
            await reader.list_runs()
            took.append(time.perf_counter() - started)
    return statistics.median(took)


def series(steps: list[dict[str, Any]]) -> Iterator[tuple[str, str, str, list[float]]]:
    """Every figure as (group, name, kind, values per step); a figure missing at a step counts as 0."""

    def of(key: str) -> list[float]:  # NaN where a step has no such figure (a plot's gap)
        return [math.nan if s[key] is None else float(s[key]) for s in steps]

    def nested(key: str) -> dict[str, list[float]]:
        names = sorted({n for s in steps for n in s[key]})
        return {n: [float(s[key].get(n, 0)) for s in steps] for n in names}

    yield "latency", "score p50 (ms)", PER_STEP, of("score_p50_ms")
    yield "latency", "score p99 (ms)", PER_STEP, of("score_p99_ms")
    yield "loop", "close to summary (s)", PER_STEP, of("close_to_summary_s")
    yield "loop", "close to update (s)", PER_STEP, of("close_to_update_s")
    for agent, values in nested("tokens").items():
        yield "tokens", f"{agent} prompt tokens", PER_STEP, values
    yield "rubrics", "rubric set size", MEMORY, of("rubrics")
    yield "rubrics", "rubric version", MEMORY, of("rubric_version")
    yield "redis", "Redis used_memory (MB)", MEMORY, of("redis_used_mb")
    yield "redis", "Redis commands", PER_STEP, of("redis_commands")
    yield "redis", "Redis traffic (kB)", PER_STEP, of("redis_kb")
    for family, values in nested("redis_keys").items():
        yield "redis", f"keys {family}", MEMORY, values
    yield "weaviate", "Weaviate objects", MEMORY, of("memories")
    yield "weaviate", "memory retrieval (ms)", PER_STEP, of("retrieval_ms")
    for name, values in nested("rss_mb").items():
        yield "services", f"{name} RSS (MB)", MEMORY, values
    for name, values in nested("cpu_ms").items():
        yield "cpu", f"{name} CPU (ms)", PER_STEP, values
    yield "reads", "rubricd status (s)", PER_STEP, of("status_s")
    yield "reads", "rubricd rubrics health (s)", PER_STEP, of("health_s")
    yield "reads", "dashboard /api/runs (s)", PER_STEP, of("dashboard_runs_s")
    yield "reads", "dashboard /api/runs/RUN (s)", PER_STEP, of("dashboard_run_s")


def table(steps: list[dict[str, Any]], skip: int = 0) -> list[dict[str, Any]]:
    """The growth table: per figure, its first and last tenth from step `skip` (the warm-up's end), their ratio, and
    a per-step figure's verdict: flat at FLAT or below; above it, GROWS where the last tenth is beyond FLAT times
    the first by more than the noise, else unresolved (the steps scatter too much to tell)."""
    rows = []
    for group, name, kind, values in series(steps[skip:]):
        head, tail = tenths(values)
        first, last = statistics.fmean(head), statistics.fmean(tail)
        ratio = last / first if first else None
        spread = noise(head, tail) if kind == PER_STEP else None
        if spread is not None:
            beyond = last - FLAT * first > spread
            verdict = "flat" if ratio is None or ratio <= FLAT else "GROWS" if beyond else "unresolved (noise)"
        else:
            verdict = f"{slope(values):+.3g} per step (second half)"
        rows.append(
            {
                "group": group,
                "figure": name,
                "kind": kind,
                "first": first,
                "last": last,
                "ratio": ratio,
                "noise": spread,
                "verdict": verdict,
            }
        )
    return rows


def plot(steps: list[dict[str, Any]], folder: Path) -> list[Path]:
    """One PNG per group of figures, each figure against the step."""
    groups: dict[str, list[tuple[str, list[float]]]] = {}
    for group, name, _, values in series(steps):
        groups.setdefault(group, []).append((name, values))
    xs = [s["step"] for s in steps]
    written = []
    for group, figures in groups.items():
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for name, values in figures:
            ax.plot(xs, values, label=name, linewidth=1)
        ax.set_xlabel("step")
        ax.set_title(f"soak: {group}")
        ax.legend(fontsize=7, loc="upper left", ncol=2)
        path = folder / f"{group}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def costs(soak: Soak) -> dict[str, dict[str, float]]:
    """Per process: idle CPU ms a second, a step's mean CPU ms, a rollout's CPU ms beyond idle, and the cores the
    run kept busy (the first step left out: its CPU counts from the start of the run)."""
    steps = soak.steps[1:]
    if not steps:
        return {}
    wall = statistics.mean(s["wall_s"] for s in steps)
    out = {}
    for name, idle_ms in sorted(soak.idle.items()):
        used = [s["cpu_ms"][name] for s in steps if name in s["cpu_ms"]]
        if not used:
            continue
        step_ms = statistics.mean(used)
        out[name] = {
            "idle_ms_per_s": idle_ms,
            "step_ms": step_ms,
            "rollout_ms": (step_ms - idle_ms * wall) / soak.args.rollouts,
            "cores": step_ms / wall / 1000,
        }
    return out


def write(soak: Soak, folder: Path) -> tuple[Path, list[dict[str, Any]]]:
    folder.mkdir(parents=True, exist_ok=True)
    skip = warmup(soak.args.retention, soak.steps)
    rows = table(soak.steps, skip)
    why = "the rubric set had not reached the size it keeps to the end" + (
        ", or not every kind retention names had begun to forget" if soak.args.retention else ""
    )
    (folder / "soak.json").write_text(
        json.dumps(
            {
                "run_id": soak.run.run_id,
                "args": vars(soak.args) | {"reports": str(soak.args.reports)},
                "steps": soak.steps,
                "growth": rows,
                "idle_cpu_ms_per_s": soak.idle,
                "costs": costs(soak),
                "many_runs": soak.many,
            },
            indent=1,
        )
    )
    pngs = plot(soak.steps, folder)
    lines = [
        f"# Soak {soak.run.run_id}",
        "",
        f"{len(soak.steps)} steps x {soak.args.rollouts} rollouts (sample groups of {soak.args.group_size}), judge "
        f"latency {soak.args.latency_ms:g} ms (the simulator), {soak.args.scorers} scorer(s) and "
        f"{soak.args.analyzers} analyzer(s), {'a rubric version every step (--churn), ' if soak.args.churn else ''}"
        "memory retention "
        f"{soak.args.retention or 'none'}. Plots: {', '.join(p.name for p in pngs)}.",
        "",
        f"The tenths are of the steps from step {skip}"
        + (f" (before it, {why})." if skip else ".")
        + f" A per-step figure is flat at {FLAT} or below; above, it GROWS where its last tenth exceeds {FLAT}"
        " times its first by more than the noise (twice the standard error: what the steps' scatter alone gives),"
        " else it is unresolved.",
        "",
        "| figure | kind | first tenth | last tenth | last / first | noise | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        spread = f"{r['noise']:.2g}" if r["noise"] is not None else "-"
        lines.append(
            f"| {r['figure']} | {r['kind']} | {r['first']:.4g} | {r['last']:.4g} | {ratio} | {spread} | {r['verdict']} |"
        )
    lines += [
        "",
        "## What each process costs",
        "",
        f"Idle: its CPU a second over {soak.args.idle_s:g} s before the run, with nothing to do (its polls). A step:"
        " its mean CPU and wall time. Per rollout: the step's CPU less the idle share of its wall time, over the "
        "step's rollouts (the CPU a rollout adds). Cores: the run's mean CPU over its mean wall time.",
        "",
        "| process | idle (ms/s) | a step (ms) | per rollout (ms) | cores |",
        "|---|---|---|---|---|",
    ]
    for name, c in costs(soak).items():
        lines.append(
            f"| {name} | {c['idle_ms_per_s']:.1f} | {c['step_ms']:.0f} | {c['rollout_ms']:.2f} | {c['cores']:.3f} |"
        )
    lines.append(f"\nA step: {statistics.mean(s['wall_s'] for s in soak.steps):.2f} s of wall time (mean).")
    if soak.many:
        m = soak.many
        lines += [
            "",
            "## Many runs",
            "",
            f"One run of {m['steps_per_run']} steps x {m['rollouts_per_step']} rollouts alone, then {m['runs']} such "
            "runs at once (a client each), each step closed and its rubric update waited on.",
            "",
            "| figure | value |",
            "|---|---|",
            f"| step, publish to rubric update, alone: p50 | {m['alone_step_p50_s']:.2f} s |",
            f"| steps per second, alone | {m['alone_steps_per_s']:.2f} |",
            f"| step, {m['runs']} runs at once: p50 / p99 | {m['together_step_p50_s']:.2f} / "
            f"{m['together_step_p99_s']:.2f} s |",
            f"| steps per second, {m['runs']} runs at once (the shared capacity) | {m['together_steps_per_s']:.2f} |",
            f"| slowest run / median run (1.0: every run served alike) | {m['slowest_over_median_run']:.2f} |",
            f"| runs `rubricd status` lists | {m['runs_listed']} |",
            f"| `rubricd status` (median of 5) | {m['status_s'] * 1000:.0f} ms |",
            f"| the dashboard's run list read (median of 5) | {m['dashboard_runs_s'] * 1000:.0f} ms |",
        ]
    report = folder / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report, rows


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per step")
    parser.add_argument("--group-size", type=int, default=4, help="responses per prompt (a sample group)")
    parser.add_argument("--latency-ms", type=float, default=0, help="the simulator's judge latency")
    parser.add_argument(
        "--churn", action="store_true", help="the simulated updater makes a version every step (a long rubric history)"
    )
    parser.add_argument(
        "--idle-s", type=float, default=30, help="seconds each process's idle CPU is measured before the run"
    )
    parser.add_argument("--scorers", type=int, default=1, help="scorer processes")
    parser.add_argument("--analyzers", type=int, default=2, help="analyzer processes")
    parser.add_argument("--runs", type=int, default=100, help="the many-runs check: runs at once (0: no check)")
    parser.add_argument("--run-steps", type=int, default=2, help="the many-runs check: steps of each run")
    parser.add_argument("--idle-runs", type=int, default=900, help="the many-runs check: runs of one rollout more")
    retention = parser.add_mutually_exclusive_group()
    retention.add_argument(
        "--retention-steps",
        type=int,
        default=0,
        metavar="N",
        help="analyses and chunk summaries kept for the last N steps, as in rubricd plan (default 0: all kept)",
    )
    retention.add_argument(
        "--retention",
        default="",
        metavar="JSON",
        help='the summarizer\'s RUBRICD_MEMORY_KEEP_STEPS, e.g. \'{"analysis": 20, "step_summary": 500}\'',
    )
    parser.add_argument(
        "--reports", type=Path, default=REPO / "reports", help="the report goes to REPORTS/soak-<time>/"
    )
    args = parser.parse_args(argv)
    if args.retention_steps < 0:
        parser.error("--retention-steps: 0 (all kept) or more")
    if args.retention_steps:  # make's $(SOAK) splits words: a JSON with spaces cannot pass through it
        args.retention = json.dumps({"analysis": args.retention_steps, "chunk_summary": args.retention_steps})
    kept = None
    with contextlib.suppress(ValueError):
        kept = json.loads(args.retention or "{}")
    if not isinstance(kept, dict) or not all(isinstance(n, int) for n in kept.values()):
        parser.error("--retention: a JSON object of kinds and steps, e.g. '{\"analysis\": 20}'")
    if args.steps < 10 or min(args.rollouts, args.group_size, args.scorers, args.analyzers) < 1 or args.latency_ms < 0:
        parser.error(
            "--steps at least 10 (a tenth is a step), --rollouts, --group-size, --scorers and --analyzers at least 1,"
            " --latency-ms >= 0"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stack = Stack(args)
    stack.up()
    os.environ.update(ENV)  # the commands timed here read the soak stack's settings
    soak = Soak(args, stack)
    try:
        asyncio.run(soak.go())
        if args.runs:
            soak.many = asyncio.run(many_runs(args, stack))
    except KeyboardInterrupt:
        print("interrupted: the steps done are reported", file=sys.stderr)
    finally:
        stack.down()
    if len(soak.steps) < 10:
        print(f"only {len(soak.steps)} steps done: no report", file=sys.stderr)
        return 1
    report, rows = write(soak, args.reports / soak.run.run_id)
    print(report.read_text())
    print(f"report: {report}")
    failing = [r["figure"] for r in rows if r["verdict"] == "GROWS"]
    print(f"per-step figures growing beyond {FLAT}: {', '.join(failing) if failing else 'none'}")
    return 0 if len(soak.steps) == args.steps else 1


if __name__ == "__main__":
    sys.exit(main())
