"""The `rubricd` command line against the real stack: each test its own namespace, services as subprocesses."""

import subprocess
import sys
from collections.abc import Awaitable, Callable

import pytest


@pytest.fixture
def cli(service_env) -> Callable[..., subprocess.CompletedProcess[str]]:
    """cli("status", "--json"): run `rubricd ...` in this test's namespace; fails the test on a bad exit status."""

    def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "rubricd_services.cli", *args],
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
def wait_len(redis, eventually) -> Callable[..., Awaitable[None]]:
    """await wait_len(stream, n): until the stream holds at least n entries (fails after `timeout` seconds)."""

    async def wait(name: str, n: int, timeout: float = 60) -> None:
        async def reached() -> bool:
            return await redis.xlen(name) >= n

        await eventually(reached, f"{name} to reach {n} entries", timeout)

    return wait
