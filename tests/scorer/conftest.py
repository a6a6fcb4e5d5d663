"""Scorer processes for integration tests: real subprocesses, killable with SIGKILL."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis as redis_sync

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event


class ScorerProcess:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.consumer = env["RUBRICD_CONSUMER"]
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "scorer"], env=env, stdout=self._log_file, stderr=subprocess.STDOUT)

    def wait_consuming(self, redis_url: str, keys: Keys, timeout: float = 30) -> "ScorerProcess":
        """Wait for this scorer's service_started event: its subscribers are reading."""
        client = redis_sync.Redis.from_url(redis_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"scorer exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            for _, fields in client.xrange(keys.events):
                event = wire.decode(wire.payload(fields), Event)
                if event.kind == "service_started" and event.fields.get("consumer") == self.consumer:
                    return self
            time.sleep(0.1)
        raise TimeoutError(f"scorer {self.consumer} did not start:\n{self.log.read_text()[-3000:]}")

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
def start_scorer(stack, namespace, tmp_path):
    """Start scorer processes in this test's namespace; all are stopped afterwards."""
    started: list[ScorerProcess] = []

    def start(**settings: object) -> ScorerProcess:
        env = {**os.environ, **stack.env, "RUBRICD_NAMESPACE": namespace}
        env["RUBRICD_CONSUMER"] = f"scorer-{len(started)}"
        env.setdefault("RUBRICD_LLM__MAX_RETRIES", "2")
        env.setdefault("RUBRICD_LLM__BACKOFF_S", "0.05")
        for name, value in settings.items():
            env[f"RUBRICD_{name.upper()}"] = str(value)
        scorer = ScorerProcess(env, tmp_path / f"scorer-{len(started)}.log")
        started.append(scorer)
        return scorer.wait_consuming(stack.redis_url, Keys(namespace))

    yield start
    for scorer in started:
        scorer.stop()
