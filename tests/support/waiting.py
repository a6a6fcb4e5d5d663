"""Waiting for what the system does, never for a fixed time: a check to come true, a group to read past an entry,
the whole loop to settle."""

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from rubricd.keys import ANALYZERS, SCORERS, SUMMARIZERS, UPDATERS, Keys


async def _eventually(check: Callable[[], Any], what: str, timeout: float = 60, every: float = 0.1) -> Any:
    """Call CHECK (sync or async) until it returns something truthy, and return that; fail the test, saying WHAT
    was awaited and what CHECK last returned, if TIMEOUT seconds pass first. A loaded machine is slow, not wrong:
    wait for what the system does, never for a fixed time."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what}; last saw {got!r}")
        await asyncio.sleep(every)


@pytest.fixture(scope="session")
def eventually() -> Callable[..., Awaitable[Any]]:
    """`await eventually(check, what, timeout=60)`: CHECK's first truthy result (CHECK sync or async, polled every
    0.1 s); fails saying it waited for WHAT."""
    return _eventually


def _stream_id(entry_id: bytes | str) -> tuple[int, int]:
    ms, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).split("-")
    return int(ms), int(seq)


async def _drained(redis: Redis, stream: str, group: str, entry_id: bytes | str, timeout: float = 60) -> None:
    async def past() -> bool:
        info = [g for g in await redis.xinfo_groups(stream) if g["name"] in (group, group.encode())]
        return bool(
            info and info[0]["pending"] == 0 and _stream_id(info[0]["last-delivered-id"]) >= _stream_id(entry_id)
        )

    await _eventually(past, f"{group} to read {stream} through {entry_id!r} and ack all it read", timeout)


@pytest.fixture(scope="session")
def drained() -> Callable[..., Awaitable[None]]:
    """`await drained(redis, stream, group, entry_id, timeout=60)`: until GROUP has read STREAM through ENTRY_ID
    and acked everything it read. A negative check ("nothing was published") after it is made once the service
    has moved past the entry, however slow the machine."""
    return _drained


@pytest.fixture
def settled(keys: Keys) -> Callable[[Redis, float], Awaitable[None]]:
    """`await settled(redis, timeout)`: until every group of the loop has read and acked all of its stream."""
    groups = [
        (keys.rollouts, SCORERS),
        (keys.scored, ANALYZERS),
        (keys.analyses, SUMMARIZERS),
        (keys.steps, SUMMARIZERS),
        (keys.summaries, UPDATERS),
    ]

    async def wait(redis: Redis, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            found = [(s, g) for s, name in groups for g in await redis.xinfo_groups(s) if g["name"].decode() == name]
            if len(found) == len(groups) and all(g["pending"] == 0 and not g["lag"] for _, g in found):
                return
            assert time.monotonic() < deadline, f"the loop did not settle in {timeout} s: {found}"
            await asyncio.sleep(0.5)

    return wait
