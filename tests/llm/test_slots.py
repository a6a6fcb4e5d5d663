"""Shared slots: background agents on a busy endpoint leave the judge the slots it needs (real Redis, simulator
with a model server's parallel slots)."""

import asyncio
import time

import msgspec
import pytest

from rubricd_services.llm import LLMClient
from rubricd_services.settings import LLMSettings
from rubricd_testbed.simulator.faults import SimConfig

LATENCY_S = 0.5  # one call; the bounds below leave it as much again for a loaded machine's overhead


class Answer(msgspec.Struct):
    text: str


def agent(url: str, **overrides: object) -> LLMSettings:
    return LLMSettings(base_url=url, max_retries=0, timeout_s=30, **overrides)


async def judge_latencies(
    url: str, redis, keys, background: LLMSettings, judge: LLMSettings, eventually, sim
) -> list[float]:
    """Three judge calls made while 16 background workers keep the endpoint busy; their latencies."""
    ask = [{"role": "user", "content": "Say something."}]
    done = asyncio.Event()
    async with (
        LLMClient({"analyzer": background}, redis=redis, namespace=keys.namespace) as busy,
        LLMClient({"judge": judge}, redis=redis, namespace=keys.namespace) as scorer,
    ):

        async def worker() -> None:
            while not done.is_set():
                await busy.structured("analyzer", ask, Answer)

        load = asyncio.gather(*(worker() for _ in range(16)))

        def queued() -> bool:  # every worker has a call out, and the first were answered while the rest waited
            return busy.endpoints()[url].in_flight == 16 and sim.stats()["requests"] > 0

        await eventually(queued, "the 16 background calls to be out and the simulator to answer some")
        latencies = []
        for _ in range(3):
            started = time.perf_counter()
            await scorer.structured("judge", ask, Answer)
            latencies.append(time.perf_counter() - started)
        done.set()
        await load
    return latencies


@pytest.mark.parametrize("shared", [False, True], ids=["per process only", "shared slots"])
async def test_the_judge_never_queues_behind_background_calls_on_a_shared_endpoint(
    simulator, sim, redis, keys, shared, eventually
):
    url = simulator[0]
    sim.config = SimConfig(slots=4, latency_ms=LATENCY_S * 1000)
    slots = {"shared_slots": 4} if shared else {}
    background = agent(url, concurrency=64, max_share=0.5, **slots)
    judge = agent(url, max_share=1.0, **slots)
    latencies = await judge_latencies(url, redis, keys, background, judge, eventually, sim)
    if shared:
        # A slot is always free for it: one call's latency (and Redis), never the backlog's.
        assert max(latencies) < 2 * LATENCY_S, latencies
        assert sim.max_in_flight <= 4
        # Every lease given back (Redis drops the emptied set).
        assert not [key async for key in redis.scan_iter(f"{keys.namespace}:llm-slots:*")]
    else:
        # Without it the judge waits its turn behind the queued background calls (4 at a time, LATENCY_S each).
        assert min(latencies) > 2 * LATENCY_S, latencies
