"""The `rubricd` command line against the real stack: each test its own namespace, services as subprocesses
(tests/support/services.py: `cli`, `start_service`)."""

from collections.abc import Awaitable, Callable

import pytest


@pytest.fixture
def wait_len(redis, eventually) -> Callable[..., Awaitable[None]]:
    """await wait_len(stream, n): until the stream holds at least n entries (fails after `timeout` seconds)."""

    async def wait(name: str, n: int, timeout: float = 60) -> None:
        async def reached() -> bool:
            return await redis.xlen(name) >= n

        await eventually(reached, f"{name} to reach {n} entries", timeout)

    return wait
