"""Summarizer (and analyzer) processes for integration tests: real subprocesses, killable with SIGKILL.

The helpers repeat tests/analyzer/conftest.py: conftest modules cannot import each other."""

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis as redis_sync

from common.embedder import MiniLMEmbedder
from common.memory import Memory
from common.settings import ServiceSettings
from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event


class ServiceProcess:
    """`python -m <service> [args]` with its output in a log file."""

    def __init__(self, service: str, env: dict[str, str], log: Path, *args: str) -> None:
        self.service = service
        self.consumer = env["RUBRICD_CONSUMER"]
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", service, *args], env=env, stdout=self._log_file, stderr=subprocess.STDOUT)

    def wait_consuming(self, redis_url: str, keys: Keys, consumers: list[str] | None = None, timeout: float = 60) -> "ServiceProcess":
        """Wait for the service_started event of each consumer (default: this process's)."""
        wanted = set(consumers or [self.consumer])
        client = redis_sync.Redis.from_url(redis_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.service} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            for _, fields in client.xrange(keys.events):
                event = wire.decode(wire.payload(fields), Event)
                if event.kind == "service_started" and event.service == self.service:
                    wanted.discard(str(event.fields.get("consumer")))
            if not wanted:
                return self
            time.sleep(0.1)
        raise TimeoutError(f"{self.service} {self.consumer} did not start:\n{self.log.read_text()[-3000:]}")

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
        self._log_file.close()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture
async def memory(stack, namespace) -> AsyncIterator[Memory]:
    """This test's evaluation memory (the services' collection), deleted afterwards."""
    settings = ServiceSettings(namespace=namespace, weaviate_url=stack.weaviate_url, weaviate_grpc_port=stack.weaviate_grpc_port)
    memory = await Memory.connect(settings, MiniLMEmbedder())
    yield memory
    await memory.drop()
    await memory.close()


def _starter(service: str, stack, namespace: str, tmp_path: Path, started: list[ServiceProcess]):
    def start(*args: str, **settings: object) -> ServiceProcess:
        n = sum(p.service == service for p in started)
        env = {**os.environ, **stack.env, "RUBRICD_NAMESPACE": namespace, "RUBRICD_CONSUMER": f"{service}-{n}"}
        env.setdefault("RUBRICD_LLM__MAX_RETRIES", "1")
        env.setdefault("RUBRICD_LLM__BACKOFF_S", "0.05")
        for name, value in settings.items():
            env[f"RUBRICD_{name.upper()}"] = str(value)
        process = ServiceProcess(service, env, tmp_path / f"{service}-{n}.log", *args)
        started.append(process)
        return process

    return start


@pytest.fixture
def processes():
    started: list[ServiceProcess] = []
    yield started
    for process in started:
        process.stop()


@pytest.fixture
def start_analyzer(stack, namespace, tmp_path, processes):
    """Start analyzer processes in this test's namespace: start_analyzer(*args, **settings)."""
    return _starter("analyzer", stack, namespace, tmp_path, processes)


@pytest.fixture
def start_summarizer(stack, namespace, tmp_path, processes):
    """Start summarizer processes in this test's namespace: start_summarizer(**settings)."""
    return _starter("summarizer", stack, namespace, tmp_path, processes)
