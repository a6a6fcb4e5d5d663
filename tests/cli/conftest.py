"""The `rubricd` command line against the real stack: each test its own namespace, services as subprocesses."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
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
    """`python -m <service>` with its output in a log file."""

    def __init__(self, service: str, env: dict[str, str], log: Path) -> None:
        self.service, self.consumer, self.log = service, env["RUBRICD_CONSUMER"], log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", service], env=env, stdout=self._log_file, stderr=subprocess.STDOUT)

    def wait_consuming(self, redis_url: str, keys: Keys, timeout: float = 60) -> "ServiceProcess":
        client = redis_sync.Redis.from_url(redis_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.service} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            for _, fields in client.xrange(keys.events):
                event = wire.decode(wire.payload(fields), Event)
                if event.kind == "service_started" and event.fields.get("consumer") == self.consumer:
                    return self
            time.sleep(0.1)
        raise TimeoutError(f"{self.service} {self.consumer} did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
        self._log_file.close()


@pytest.fixture
def namespace() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture
def env(stack, namespace) -> dict[str, str]:
    """The environment of a service or of `rubricd` in this test's namespace on the test stack."""
    return {**os.environ, **stack.env, "RUBRICD_NAMESPACE": namespace,
            "RUBRICD_LLM__MAX_RETRIES": "1", "RUBRICD_LLM__BACKOFF_S": "0.05"}  # fmt: skip


@pytest.fixture
def start_service(stack, keys, env, tmp_path):
    """start_service("scorer", **settings): a service process in this test's namespace; all stopped afterwards."""
    started: list[ServiceProcess] = []

    def start(service: str, **settings: object) -> ServiceProcess:
        consumer = f"{service}-{len(started)}"
        process_env = {**env, "RUBRICD_CONSUMER": consumer, **{f"RUBRICD_{k.upper()}": str(v) for k, v in settings.items()}}
        process = ServiceProcess(service, process_env, tmp_path / f"{consumer}.log")
        started.append(process)
        return process.wait_consuming(stack.redis_url, keys)

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def cli(env) -> Callable[..., subprocess.CompletedProcess[str]]:
    """cli("status", "--json"): run `python -m cli ...` in this test's namespace; fails the test on a bad exit status."""

    def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "cli", *args], env=env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        if check and done.returncode != 0:
            pytest.fail(f"rubricd {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}", pytrace=False)
        return done

    return run


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
async def memory(stack, namespace) -> AsyncIterator[Memory]:
    """This test's evaluation memory, deleted afterwards."""
    settings = ServiceSettings(namespace=namespace, weaviate_url=stack.weaviate_url, weaviate_grpc_port=stack.weaviate_grpc_port)
    memory = await Memory.connect(settings, MiniLMEmbedder())
    yield memory
    await memory.drop()
    await memory.close()
