"""Rate limits shared through Redis: requests and tokens per minute across processes (real Redis, simulator)."""

import asyncio
import time
import uuid

import msgspec
import pytest
from redis.asyncio import Redis

from rubricd_services.cli.redis_acl import services
from rubricd_services.llm import LLMClient
from rubricd_services.llm.limits import RateLimit
from rubricd_services.llm.slots import SharedSlots
from rubricd_services.settings import LLMSettings


class Answer(msgspec.Struct):
    text: str


def ask() -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Say something. ({uuid.uuid4().hex[:8]})"}]


async def test_bookings_from_two_processes_never_exceed_the_rate(stack, redis, keys) -> None:
    key = keys.llm_rate("http://llm/v1")
    other = Redis.from_url(stack.redis_url)  # another process's connection
    try:
        limits = [RateLimit(redis, key), RateLimit(other, key)]
        began = time.monotonic()
        booked = await asyncio.gather(*(limits[i % 2].book(600, None, 1) for i in range(100)))
        booking_s = time.monotonic() - began  # how long the bookings themselves took (a loaded machine: longer)
    finally:
        await other.aclose()
    starts = sorted(start for _, start in booked)  # Redis's clock, µs
    # 600 a minute: one every 100 ms, so no second (no minute) ever holds more than 10 (600).
    assert all(b - a >= 100_000 - 1 for a, b in zip(starts, starts[1:]))
    assert max(sum(s <= t < s + 1_000_000 for t in starts) for s in starts) == 10
    # The last start is 9.9 s after the first; it was booked at most `booking_s` after the first booking, so it
    # was told to wait at least the difference: the 100th waits its turn.
    assert max(wait for wait, _ in booked) >= (starts[-1] - starts[0]) / 1e6 - booking_s - 0.01


async def test_two_llm_clients_together_stay_under_the_rpm(simulator, sim, stack, keys, monkeypatch) -> None:
    limited = LLMSettings(base_url=simulator[0], rpm=1200, max_retries=0)  # one call every 50 ms
    clients = [Redis.from_url(stack.redis_url) for _ in range(2)]
    done: list[float] = []
    # Each call's booked start (Redis's clock), and when each call reached the endpoint (the same host's clock): a
    # loaded machine sends a call late and its replies come bunched, but it never sends one before its turn.
    starts: list[float] = []
    arrivals: list[float] = []
    book, slot = RateLimit.book, sim.slot

    async def booked(self: RateLimit, rpm: int | None, tpm: int | None, tokens: int) -> tuple[float, int]:
        wait, start = await book(self, rpm, tpm, tokens)
        starts.append(start / 1e6)
        return wait, start

    def arrived() -> object:
        arrivals.append(time.time())
        return slot()

    monkeypatch.setattr(RateLimit, "book", booked)
    monkeypatch.setattr(sim, "slot", arrived)
    try:
        async with (
            LLMClient({"judge": limited}, redis=clients[0], namespace=keys.namespace) as one,
            LLMClient({"judge": limited}, redis=clients[1], namespace=keys.namespace) as two,
        ):

            async def call(llm: LLMClient) -> None:
                await llm.structured("judge", ask(), Answer)
                done.append(time.monotonic())

            started = time.monotonic()
            await asyncio.gather(*(call(one if i % 2 else two) for i in range(41)))
    finally:
        for client in clients:
            await client.aclose()
    assert sim.stats()["requests"] == 41
    assert done[-1] - started >= 40 * 0.05 - 0.01  # 41 calls: 40 gaps of 50 ms at least
    starts.sort()
    arrivals.sort()
    assert len(starts) == len(arrivals) == 41
    # The two LLM clients' calls were given starts 50 ms apart: no half second admits more than 10 (no minute 1200)...
    assert all(b - a >= 0.05 - 1e-6 for a, b in zip(starts, starts[1:]))
    assert max(sum(s <= t < s + 0.5 for t in starts) for s in starts) == 10
    # ... and none reached the endpoint before its start (the k-th arrival is not before the k-th start).
    assert all(arrival >= start - 0.001 for start, arrival in zip(starts, arrivals)), (starts, arrivals)


async def test_the_limits_are_the_endpoints_every_agent_that_calls_it_books_them(simulator, sim, redis, keys) -> None:
    limited = LLMSettings(base_url=simulator[0], rpm=1200, max_retries=0)  # one call every 50 ms
    unset = LLMSettings(base_url=simulator[0], max_retries=0)  # the analyzer leaves the limit to the judge's setting
    async with LLMClient({"judge": limited, "analyzer": unset}, redis=redis, namespace=keys.namespace) as llm:
        started = time.monotonic()
        await asyncio.gather(*(llm.structured("analyzer" if i % 2 else "judge", ask(), Answer) for i in range(21)))
        assert time.monotonic() - started >= 20 * 0.05 - 0.01  # the analyzer's calls were paced too
    with pytest.raises(ValueError, match="different rate limits .*RUBRICD_LLM__RPM"):
        LLMClient({"judge": limited, "analyzer": unset.model_copy(update={"rpm": 60})}, redis=redis)


async def test_booked_tokens_are_corrected_with_what_the_call_used(redis, keys) -> None:
    limit = RateLimit(redis, keys.llm_rate("http://llm/v1"))
    tpm = 60_000  # one token a millisecond
    # Starts compared on Redis's clock, and bookings of seconds: however slowly a loaded machine books, the third
    # books long before the start it is given.
    first, began = await limit.book(None, tpm, 60_000)
    second, second_start = await limit.book(None, tpm, 10)
    await limit.correct(tpm, 6000 - 60_000)  # the first used 6,000 of the 60,000 it booked
    third, third_start = await limit.book(None, tpm, 10)
    assert first == 0 and second_start - began == 60_000_000 and 50 <= second <= 60
    # After the first's 6,000 and the second's 10, not the 60,000 booked.
    assert third_start - began == 6_010_000 and 0 < third <= 6.01


async def test_the_llm_client_books_an_estimate_and_corrects_it(simulator, sim, redis, keys) -> None:
    limited = LLMSettings(base_url=simulator[0], tpm=60_000, max_tokens=3000, max_retries=0)  # a token a millisecond
    async with LLMClient({"judge": limited}, redis=redis, namespace=keys.namespace) as llm:
        started = time.perf_counter()
        first = await llm.structured("judge", ask(), Answer)
        await llm.structured("judge", ask(), Answer)
        took = time.perf_counter() - started
    used = (first.prompt_tokens + first.completion_tokens) / 1000
    assert used <= took < 3.0, (used, took)  # paced by what the first used, not by the 3000 tokens it booked


async def test_every_service_user_may_book_and_hold_its_endpoints_calls(stack, redis, keys) -> None:
    url = "http://llm/v1"
    for user in services(keys):
        name = f"{keys.namespace}-{user.name}"
        await redis.execute_command("ACL", "SETUSER", name, "on", ">pw", *user.rules().split())
        client = Redis.from_url(stack.redis_url, username=name, password="pw")
        try:
            limit = RateLimit(client, keys.llm_rate(url))
            await limit.book(6000, 60_000, 100)
            await limit._adjust(keys=[limit.key], args=[-50_000, 1000])  # correct() and pause() swallow errors
            async with SharedSlots(client, keys.llm_slots(url), 2).hold(1.0, 5):
                pass
        finally:
            await client.aclose()
            await redis.execute_command("ACL", "DELUSER", name)
