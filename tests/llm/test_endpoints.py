"""Replicas of an endpoint: least-loaded routing, failover, health in the metrics, and a 429's Retry-After
pausing the endpoint (real simulators, and a real Redis for the deployment-wide pause)."""

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator

import msgspec
import pytest

from rubricd_services.llm import LLMClient
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.settings import LLMSettings, ServiceSettings, load
from rubricd_testbed.simulator.app import Simulator, serve_in_background
from rubricd_testbed.simulator.faults import SimConfig
from tests.prometheus import sample


class Answer(msgspec.Struct):
    text: str


ASK = [{"role": "user", "content": "Say something."}]


@pytest.fixture
def replicas() -> Iterator[list[tuple[str, Simulator]]]:
    """Two more in-process simulators, (base url, state) each."""
    with serve_in_background(SimConfig()) as a, serve_in_background(SimConfig()) as b:
        yield [a, b]


def down_url() -> str:
    """A port where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def agent(urls: list[str], **overrides: object) -> LLMSettings:
    return LLMSettings(**{"base_url": urls[0], "replicas": urls[1:], "max_retries": 0, "timeout_s": 10, **overrides})


def ask(marker: str = "") -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Say something. {marker}"}]


async def test_calls_at_once_are_spread_evenly_over_equal_replicas(replicas) -> None:
    (a, sim_a), (b, sim_b) = replicas
    # Long enough that all 8 are in flight at once at the simulators, however slowly a loaded machine sends them.
    sim_a.config = sim_b.config = SimConfig(latency_ms=1000)
    async with LLMClient({"judge": agent([a, b])}) as llm:
        await asyncio.gather(*(llm.structured("judge", ASK, Answer) for _ in range(8)))
    assert sim_a.max_in_flight == sim_b.max_in_flight == 4


async def test_the_less_loaded_replica_gets_the_calls(replicas) -> None:
    (slow, sim_slow), (fast, sim_fast) = replicas
    # The slow one holds its calls past the 1.5 s the workers run: a loaded machine's slower calls to the fast one
    # change how many it gets, not that it gets the rest.
    sim_slow.config, sim_fast.config = SimConfig(latency_ms=2000), SimConfig(latency_ms=20)
    async with LLMClient({"judge": agent([slow, fast])}) as llm:
        deadline = time.monotonic() + 1.5

        async def worker() -> None:
            while time.monotonic() < deadline:
                await llm.structured("judge", ASK, Answer)

        await asyncio.gather(*(worker() for _ in range(4)))
    slow_calls, fast_calls = sim_slow.stats()["requests"], sim_fast.stats()["requests"]
    # Round robin would split them evenly; the slow one keeps its calls in flight, so the fast one gets the rest.
    assert fast_calls > 5 * slow_calls > 0, (slow_calls, fast_calls)


async def test_with_a_replica_down_every_call_succeeds_through_the_other_and_the_metrics_say_so(replicas) -> None:
    (up, sim), down = replicas[0], down_url()
    metrics = Metrics("scorer")
    async with LLMClient({"judge": agent([down, up], cooldown_s=60)}) as llm:
        metrics.watch_llm(llm)
        done = await asyncio.gather(*(llm.structured("judge", ASK, Answer) for _ in range(20)))
        done += [await llm.structured("judge", ASK, Answer) for _ in range(5)]
        usage = llm.usage("judge")
        assert sample(metrics, "rubricd_llm_endpoint_up", endpoint=down) == 0
        assert sample(metrics, "rubricd_llm_endpoint_up", endpoint=up) == 1
    assert len(done) == 25 and sim.stats()["requests"] == 25 and usage.failures == 0
    # Calls made at once tried it before it was known down; once it was, none did.
    failed = sample(metrics, "rubricd_llm_endpoint_failures_total", endpoint=down)
    assert 1 <= failed <= 20 and usage.retries == failed
    assert sample(metrics, "rubricd_llm_endpoint_calls_total", endpoint=up) == 25
    assert sample(metrics, "rubricd_llm_endpoint_in_flight", endpoint=up) == 0


async def test_a_replica_that_dies_under_load_costs_no_call(replicas, eventually) -> None:
    (a, sim_a), (b, _) = replicas
    sim_a.config = SimConfig(latency_ms=20)
    with contextlib.ExitStack() as stack:
        dying, sim_dying = stack.enter_context(serve_in_background(SimConfig(latency_ms=20)))
        async with LLMClient({"judge": agent([a, dying], cooldown_s=60)}) as llm:
            stop = asyncio.Event()

            async def worker() -> int:
                calls = 0
                while not stop.is_set():
                    await llm.structured("judge", ASK, Answer)
                    calls += 1
                return calls

            workers = asyncio.gather(*(worker() for _ in range(8)))
            await eventually(lambda: sim_dying.stats()["requests"] >= 8, "the dying replica to serve 8 calls")
            served = sim_dying.stats()["requests"]
            await asyncio.to_thread(stack.close)  # the replica goes away, connections and all
            await eventually(lambda: not llm.endpoints()[dying].up, "the LLM client to pass the dead replica over")
            survived = sim_a.stats()["requests"]
            await eventually(lambda: sim_a.stats()["requests"] >= survived + 16, "16 more calls after the death")
            stop.set()
            calls = sum(await workers)  # raises if any call failed
            assert not llm.endpoints()[dying].up
    assert served > 0 and calls > served


async def test_a_429_from_one_replica_sends_the_calls_to_the_other_at_once(replicas) -> None:
    (limited, sim_limited), (other, _) = replicas
    sim_limited.config = SimConfig(fail_rate=1, failures=["429"], retry_after_s=120)
    async with LLMClient({"judge": agent([limited, other], backoff_s=60)}) as llm:
        started = time.perf_counter()
        await asyncio.gather(*(llm.structured("judge", ASK, Answer) for _ in range(10)))
        took = time.perf_counter() - started
        health = llm.endpoints()[limited]
    assert took < 30  # neither the Retry-After (120 s) nor a backoff (60 s) was waited for
    assert not health.up and health.failures >= 1


async def test_a_429s_retry_after_delays_the_retry_and_every_other_call_of_the_process(
    simulator, sim, eventually
) -> None:
    url = simulator[0]
    async with LLMClient({"judge": agent([url], max_retries=1, backoff_s=0.01)}) as llm:
        started = time.perf_counter()
        first = asyncio.create_task(llm.structured("judge", ask("[sim:fail=429,times=1,retry_after=1]"), Answer))
        await eventually(lambda: not llm.endpoints()[url].up, "the 429 to pause the endpoint", every=0.01)
        other = await llm.structured("judge", ask(), Answer)
        other_took = time.perf_counter() - started
        done = await first
        took = time.perf_counter() - started
    assert done.attempts == 2 and took >= 1.0
    assert other.attempts == 1 and other_took >= 1.0  # it waited for the pause too
    assert sim.stats()["outcomes"] == {"429": 1, "ok": 2}


async def test_a_429s_retry_after_pauses_the_endpoint_for_the_whole_deployment(
    simulator, sim, redis, keys, eventually
) -> None:
    url = simulator[0]
    limited = agent([url], max_retries=1, backoff_s=0.01, rpm=6000)  # a limit that never binds: the pause does
    async with (
        LLMClient({"judge": limited}, redis=redis, namespace=keys.namespace) as here,
        LLMClient({"judge": limited}, redis=redis, namespace=keys.namespace) as elsewhere,
    ):
        await elsewhere.structured("judge", ask(), Answer)
        started = time.perf_counter()
        first = asyncio.create_task(here.structured("judge", ask("[sim:fail=429,times=1,retry_after=1]"), Answer))

        async def paused_in_redis() -> bool:
            paused = await redis.hget(keys.llm_rate(url), "paused")  # µs of Redis's clock
            seconds, micros = await redis.time()
            return paused is not None and int(paused) > seconds * 1_000_000 + micros

        await eventually(paused_in_redis, "the pause in Redis", every=0.01)
        await elsewhere.structured("judge", ask(), Answer)
        took = time.perf_counter() - started
        await first
    assert took >= 1.0 and elsewhere.endpoints()[url].up  # it waited, told by Redis, not by a 429 of its own


def test_a_malformed_replica_url_stops_the_service_naming_the_setting(monkeypatch) -> None:
    monkeypatch.setenv("RUBRICD_LLM__REPLICAS", '["http://10.0.0.2:8000/v1", "http://user:secret@10.0.0.3/v1"]')
    with pytest.raises(SystemExit) as stopped:
        load(ServiceSettings)
    assert "RUBRICD_LLM__REPLICAS" in str(stopped.value) and "secret" not in str(stopped.value)
    monkeypatch.setenv("RUBRICD_LLM__REPLICAS", '["http://10.0.0.2:8000/v1", "http://10.0.0.3:8000/v1"]')
    assert load(ServiceSettings).agent("judge").replicas == ["http://10.0.0.2:8000/v1", "http://10.0.0.3:8000/v1"]
