"""The `rubricd` command line against the real stack: each test its own namespace, services as subprocesses."""

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable

import pytest


@pytest.fixture
def cli(service_env) -> Callable[..., subprocess.CompletedProcess[str]]:
    """cli("status", "--json"): run `python -m cli ...` in this test's namespace; fails the test on a bad exit status."""

    def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "cli", *args],
            env=service_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode != 0:
            pytest.fail(
                f"rubricd {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}", pytrace=False
            )
        return done

    return run


@pytest.fixture
def wait_len(redis) -> Callable[..., Awaitable[None]]:
    """await wait_len(stream, n): until the stream holds at least n entries (fails after `timeout` seconds)."""

    async def wait(name: str, n: int, timeout: float = 60) -> None:
        for _ in range(int(timeout * 10)):
            if await redis.xlen(name) >= n:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{name} did not reach {n} entries")

    return wait
