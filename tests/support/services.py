"""The services, the `rubricd` command and the dashboard as processes in the test's namespace on the test stack
(forked: tests/forks.py, but the dashboard)."""

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event
from tests import forks
from tests.factories import starter
from tests.support.stack import Stack


class ServiceProcess:
    """`rubricd serve <service> [args]` (forked: tests/forks.py), its output in a log file; killable with SIGKILL."""

    def __init__(self, service: str, env: dict[str, str], log: Path, *args: str) -> None:
        self.service, self.consumer, self.log = service, env["RUBRICD_CONSUMER"], log
        self.proc = forks.Forked(["serve", service, *args], env, log)

    def wait_consuming(
        self, redis_url: str, keys: Keys, consumers: list[str] | None = None, timeout: float = 90
    ) -> "ServiceProcess":
        """Wait for the service_started event of each consumer (default: this process's): its subscribers are reading."""
        wanted = set(consumers or [self.consumer])
        client = redis_sync.Redis.from_url(redis_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.service} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            for _, fields in client.xrange(keys.events):
                event = wire.decode(wire.payload(fields), Event)
                if event.kind == "service_started" and event.service == self.service:
                    wanted.discard(str(event.fields.get("consumer")))
            if not wanted:
                return self
            time.sleep(0.1)
        raise TimeoutError(f"{self.service} {sorted(wanted)} did not start:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def service_env(stack: Stack, namespace: str) -> dict[str, str]:
    """The environment of a service (or `rubricd`) in this test's namespace on the test stack; LLM retries kept short."""
    return {
        **os.environ,
        **stack.env,
        "RUBRICD_NAMESPACE": namespace,
        "RUBRICD_LLM__MAX_RETRIES": "1",
        "RUBRICD_LLM__BACKOFF_S": "0.05",
    }


@pytest.fixture
def start_service(
    stack: Stack, keys: Keys, service_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., ServiceProcess]]:
    """start_service("scorer", *args, wait=True, **settings): a service process in this test's namespace,
    consumer `<service>-<n>`, settings as RUBRICD_<NAME>; waits until it reads (unless wait=False); all stopped afterwards."""
    started: list[ServiceProcess] = []

    def start(service: str, *args: str, wait: bool = True, **settings: object) -> ServiceProcess:
        n = sum(p.service == service for p in started)
        env = {
            **service_env,
            "RUBRICD_CONSUMER": f"{service}-{n}",
            **{f"RUBRICD_{k.upper()}": str(v) for k, v in settings.items()},
        }
        process = ServiceProcess(service, env, tmp_path / f"{service}-{n}.log", *args)
        started.append(process)
        return process.wait_consuming(stack.redis_url, keys) if wait else process

    yield start
    for process in started:
        process.stop()


# Each service as processes in this test's namespace, `start_scorer(*args, **settings)`: settings as RUBRICD_<NAME>,
# over these defaults; it returns once the process reads, but for the analyzer (`--workers N` starts several) and
# the summarizer, whose tests call `wait_consuming` themselves. A folder's conftest.py may define its own.
start_scorer = starter("scorer", llm__max_retries=2)
start_comparer = starter("comparer", llm__max_retries=2)
start_arm = starter("arm", llm__max_retries=2)
start_updater = starter("updater", llm__max_retries=2)
start_analyzer = starter("analyzer", wait=False)
start_summarizer = starter("summarizer", wait=False)


@pytest.fixture
def cli(service_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """cli("status", "--json", check=True, timeout=120): `rubricd ...` in this test's namespace; with check, a bad
    exit status fails the test with its output."""

    def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = forks.run(*args, env=service_env, timeout=timeout)
        if check and done.returncode != 0:
            pytest.fail(
                f"rubricd {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}", pytrace=False
            )
        return done

    return run


@contextlib.contextmanager
def _serve_dashboard(env: dict[str, str], port: int) -> Iterator[str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "rubricd_services.cli", "serve", "dashboard", "--port", str(port), "--refresh", "0.5"],
        env=env,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(url + "health", timeout=2).status == 204:  # Redis answers
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the dashboard did not answer on {url} (exit status {server.poll()})")
            time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="session")
def serve_dashboard() -> Callable[[dict[str, str], int], contextlib.AbstractContextManager[str]]:
    """`with serve_dashboard(env, port) as url:` `rubricd serve dashboard` with ENV's settings (refreshing twice a second),
    once its /health answers; stopped on leaving."""
    return _serve_dashboard
