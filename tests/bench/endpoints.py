"""Benchmark: an agent on two replicas vs one, and the shared rate limit holding its rate.

    make bench                      # runs this after tests/bench/scoring.py
    .venv/bin/python tests/bench/endpoints.py --calls 600 --latency-ms 100 --slots 8 --rpm 600 --seconds 20

Starts its own Redis (stack dir .stack/bench-endpoints, own port) and two LLM
simulators, each serving `slots` calls at once with a fixed latency, so one
endpoint saturates at slots / latency calls a second. In the same run:
  - replicas: one LLM client makes N calls, C at once, to one endpoint, then to
    the same endpoint with a second as its replica; prints calls/s, p50 and
    p99 latency, and the ratio of the throughputs;
  - rate limit: P processes, each with its own LLM client and C callers, call one
    endpoint with rpm set for `seconds`; prints the rate they achieved together
    against the configured one.
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import httpx
import msgspec
import redis as redis_sync
from redis.asyncio import Redis

from rubricd_services.llm import LLMClient
from rubricd_services.settings import LLMSettings

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "deploy/local/stack.sh"
ENV = {"RUBRICD_STACK_DIR": str(REPO / ".stack/bench-endpoints"), "RUBRICD_REDIS_PORT": "6396"}
REDIS_URL = f"redis://127.0.0.1:{ENV['RUBRICD_REDIS_PORT']}/0"
NAMESPACE = "bench-endpoints"


class Answer(msgspec.Struct):
    text: str


def ask(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Say something about {i}."}]


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_simulator(port: int, latency_ms: float, slots: int) -> subprocess.Popen[bytes]:
    args = ["--port", str(port), "--latency-ms", str(latency_ms), "--slots", str(slots), "--log-level", "warning"]
    process = subprocess.Popen([sys.executable, "-m", "rubricd_services.cli", "serve", "simulator", *args])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"the simulator on {port} did not start")


async def throughput(urls: list[str], calls: int, concurrency: int) -> tuple[float, list[float]]:
    """N calls, C at once, through one LLM client whose agent has these endpoints: (wall s, latencies)."""
    agent = LLMSettings(base_url=urls[0], replicas=urls[1:], concurrency=concurrency, max_retries=0)
    queue = list(range(calls))
    latencies: list[float] = []
    async with LLMClient({"judge": agent}) as llm:

        async def worker() -> None:
            while queue:
                i = queue.pop()
                started = time.perf_counter()
                await llm.structured("judge", ask(i), Answer)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started, latencies


def limited_process(url: str, rpm: int, concurrency: int, start_at: float, seconds: float) -> list[float]:
    """One process of the rate-limit run: its callers' completion times within [start_at, start_at + seconds)."""
    return asyncio.run(limited(url, rpm, concurrency, start_at, seconds))


async def limited(url: str, rpm: int, concurrency: int, start_at: float, seconds: float) -> list[float]:
    agent = LLMSettings(base_url=url, rpm=rpm, concurrency=concurrency, max_retries=0)
    redis = Redis.from_url(REDIS_URL)
    done: list[float] = []
    async with LLMClient({"judge": agent}, redis=redis, namespace=NAMESPACE) as llm:
        await asyncio.sleep(start_at - time.time())

        async def worker(n: int) -> None:
            while time.time() < start_at + seconds:
                await llm.structured("judge", ask(n), Answer)
                done.append(time.time())

        workers = [asyncio.create_task(worker(n)) for n in range(concurrency)]
        await asyncio.sleep(start_at + seconds - time.time())
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    await redis.aclose()
    return [t for t in done if t < start_at + seconds]


async def compare_replicas(urls: list[str], args: argparse.Namespace) -> None:
    await throughput(urls, 50, 16)  # warm up both
    print(
        f"\n== replicas: N={args.calls} calls, C={args.concurrency} at once; each endpoint: {args.slots} slots, "
        f"{args.latency_ms:g} ms a call (at most {args.slots / args.latency_ms * 1000:.0f} calls/s)"
    )
    print(f"{'':13} {'wall s':>7} {'calls/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    rates = []
    for name, endpoints in (("one endpoint", urls[:1]), ("two replicas", urls)):
        wall, latencies = await throughput(endpoints, args.calls, args.concurrency)
        rates.append(args.calls / wall)
        print(
            f"{name:13} {wall:7.2f} {args.calls / wall:8.1f} {pct(latencies, 50) * 1000:8.1f} "
            f"{pct(latencies, 99) * 1000:8.1f}"
        )
    print(f"ratio two/one (throughput): {rates[1] / rates[0]:.2f}")


def measure_limit(url: str, args: argparse.Namespace) -> None:
    redis_sync.Redis.from_url(REDIS_URL).flushdb()
    start_at = time.time() + 3  # every process has its LLM client up by then
    with ProcessPoolExecutor(args.processes, mp_context=get_context("spawn")) as pool:
        runs = [
            pool.submit(limited_process, url, args.rpm, args.concurrency, start_at, args.seconds)
            for _ in range(args.processes)
        ]
        done = sorted(t for run in runs for t in run.result())
    worst_minute_share = max(sum(s <= t < s + 1 for t in done) for s in done) * 60
    print(
        f"\n== rate limit: rpm={args.rpm} on one endpoint, {args.processes} processes x {args.concurrency} callers, "
        f"{args.seconds:g} s"
    )
    print(f"calls: {len(done)} ({', '.join(str(len(r.result())) for r in runs)} per process)")
    print(
        f"achieved: {len(done) / args.seconds * 60:.0f} rpm, configured {args.rpm} "
        f"(ratio {len(done) / args.seconds * 60 / args.rpm:.3f}); busiest second x 60: {worst_minute_share}"
    )


async def main(args: argparse.Namespace) -> None:
    env = {**os.environ, **ENV}
    subprocess.run([str(STACK), "up", "redis"], env=env, check=True)
    ports = [free_port(), free_port()]
    simulators = [start_simulator(port, args.latency_ms, args.slots) for port in ports]
    urls = [f"http://127.0.0.1:{port}/v1" for port in ports]
    try:
        print(f"{os.cpu_count()} CPUs; two simulator processes")
        await compare_replicas(urls, args)
        await asyncio.to_thread(measure_limit, urls[0], args)
    finally:
        for process in simulators:
            process.terminate()
            process.wait(timeout=30)
        subprocess.run([str(STACK), "down"], env=env, check=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=100)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--rpm", type=int, default=600)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--processes", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
