"""The real servers, started by the suite: Redis, Weaviate and the LLM simulator.

`stack` brings them up once per session with deploy/local/stack.sh (the script
behind `make up`) in its own directory and on its own ports, so it never
touches a demo stack, and takes them down when the session ends. Only tests
that ask for it (directly or through `redis`) start it; they are marked
`integration` automatically (tests/support/session.py), so `pytest -m "not integration"` needs no server.
`start_stack` and `start_module_stack` start extra stacks, for a test or a module.
"""

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from tests.support.ports import free_port_block, port_free, stack_ports

REPO = Path(__file__).resolve().parents[2]
STACK_SH = REPO / "deploy" / "local" / "stack.sh"
TEST_STACK_DIR = REPO / ".stack" / "test"
# All below the kernel's ephemeral range (32768-60999): a busy client can hold
# any port in it for a moment, and a server that starts then cannot bind it.
TEST_PORTS = {
    "RUBRICD_REDIS_PORT": 6398,
    "RUBRICD_WEAVIATE_PORT": 8088,
    "RUBRICD_WEAVIATE_GRPC_PORT": 30062,
    "RUBRICD_SIMULATOR_PORT": 8098,
    "RUBRICD_METRICS_BASE_PORT": 9200,  # services' /health and /metrics: 9201-9203, 9211+
}
# Each pytest session, and each xdist worker of one (a session of its own), takes the first free slot:
# .stack/test, then .stack/test-1 on the ports above + 100, ... Ten at most: Weaviate derives its cluster
# ports from its HTTP port modulo 1000.
SLOTS = 10
# Settings that would send the script or the services to someone else's server, or lock the suite's stack
# down (a test that wants a locked-down stack asks for one).
FOREIGN_SETTINGS = (
    "RUBRICD_REDIS_URL",
    "RUBRICD_WEAVIATE_URL",
    "WEAVIATE_URL",
    "RUBRICD_LLM__BASE_URL",
    "RUBRICD_SECURE",
    "RUBRICD_REDIS_TLS",
    "RUBRICD_WEAVIATE_API_KEY",
    "RUBRICD_STACK_LLM",
)


@dataclass(frozen=True)
class Stack:
    """Where one running stack is, and how to drive it with stack.sh."""

    stack_dir: Path
    ports: dict[str, int]
    script_env: dict[str, str] = field(repr=False)

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['RUBRICD_REDIS_PORT']}/0"

    @property
    def weaviate_port(self) -> int:
        return self.ports["RUBRICD_WEAVIATE_PORT"]

    @property
    def weaviate_url(self) -> str:
        return f"http://127.0.0.1:{self.weaviate_port}"

    @property
    def weaviate_grpc_port(self) -> int:
        return self.ports["RUBRICD_WEAVIATE_GRPC_PORT"]

    @property
    def simulator_port(self) -> int:
        return self.ports["RUBRICD_SIMULATOR_PORT"]

    @property
    def llm_base_url(self) -> str:
        return f"http://127.0.0.1:{self.simulator_port}/v1"

    @property
    def env(self) -> dict[str, str]:
        """The RUBRICD_* settings that point a service subprocess at this stack."""
        return {
            "RUBRICD_REDIS_URL": self.redis_url,
            "RUBRICD_WEAVIATE_URL": self.weaviate_url,
            "RUBRICD_WEAVIATE_GRPC_PORT": str(self.weaviate_grpc_port),
            "RUBRICD_LLM__BASE_URL": self.llm_base_url,
        }

    def sh(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `deploy/local/stack.sh ARGS` on this stack; fail the test with its output if it fails."""
        done = subprocess.run(
            ["bash", str(STACK_SH), *args],
            env=self.script_env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=600,  # a first `up weaviate` on a machine without the cached binary builds it
        )
        if check and done.returncode != 0:
            pytest.fail(
                f"stack.sh {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}", pytrace=False
            )
        return done


def make_stack(stack_dir: Path, ports: dict[str, int], settings: dict[str, str] | None = None) -> Stack:
    """A Stack in STACK_DIR on PORTS (any RUBRICD_*_PORT stack.sh reads), always self-started;
    SETTINGS (RUBRICD_*) reach every process it starts."""
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_SETTINGS}
    env |= {k: str(v) for k, v in ports.items()} | (settings or {})
    stack_dir = stack_dir.resolve()  # the marker stack.sh puts on its processes is the real path
    env |= {"RUBRICD_STACK_DIR": str(stack_dir), "RUBRICD_PYTHON": sys.executable}
    return Stack(stack_dir=stack_dir, ports=dict(ports), script_env=env)


def _claim_slot() -> tuple[Stack, IO[str]]:
    """The first test-stack slot no other live pytest session holds (the lock dies with its holder), cleared of
    what a killed session left in it, whose ports are free: a session of another checkout (a clean clone's CI)
    uses the same slots under its own locks."""
    TEST_STACK_DIR.parent.mkdir(parents=True, exist_ok=True)
    for slot in range(SLOTS):
        name = TEST_STACK_DIR.name + (f"-{slot}" if slot else "")
        lock = open(TEST_STACK_DIR.parent / f"{name}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        stack = make_stack(TEST_STACK_DIR.parent / name, {k: p + 100 * slot for k, p in TEST_PORTS.items()})
        stack.sh("down")  # what a killed session left in this slot
        if not all(port_free(port) for port in stack.ports.values()):
            lock.close()
            continue
        return stack, lock
    pytest.fail(f"all {SLOTS} test stack slots are held by other pytest sessions", pytrace=False)


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest) -> Stack:
    """Redis, Weaviate and the simulator for this session, on fresh data; taken down at the end."""
    stack, lock = _claim_slot()

    def down() -> None:
        stack.sh("down", check=False)
        lock.close()

    request.addfinalizer(down)
    shutil.rmtree(stack.stack_dir, ignore_errors=True)
    stack.sh("up", "redis", "weaviate", "simulator")
    return stack


@contextlib.contextmanager
def extra_stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Stack]]:
    """`start(ports, *components, env={...})` starts a stack in a temporary dir; all go down on exit."""
    started: list[Stack] = []

    def start(ports: dict[str, int], *components: str, env: dict[str, str] | None = None) -> Stack:
        extra = make_stack(tmp_path_factory.mktemp("stack"), ports, env)
        started.append(extra)
        extra.sh("up", *components)
        return extra

    try:
        yield start
    finally:
        for extra in started:
            extra.sh("down", check=False)


@pytest.fixture
def start_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Stack]]:
    """Start extra stacks: `start_stack(ports, *components, env={...})` in a temporary dir; all go down after the test."""
    with extra_stacks(tmp_path_factory) as start:
        yield start


@pytest.fixture(scope="module")
def start_module_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Stack]]:
    """A stack the tests of a module share: `start_module_stack(*components, env={...})` on fresh ports;
    it goes down after the module."""
    with extra_stacks(tmp_path_factory) as start:
        yield lambda *components, env=None: start(stack_ports(free_port_block(22)), *components, env=env)
