"""The real servers, started by the suite: Redis, Weaviate and the LLM simulator.

`stack` brings them up once per session with deploy/local/stack.sh (the script
behind `make up`) in its own directory and on its own ports, so it never
touches a demo stack, and takes them down when the session ends. Only tests
that ask for it (directly or through `redis`) start it; they are marked
`integration` automatically, so `pytest -m "not integration"` needs no server.
"""

import asyncio
import contextlib
import fcntl
import inspect
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import redis as redis_sync
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import ANALYZERS, SCORERS, SUMMARIZERS, UPDATERS, Keys
from rubricd.messages import Event
from rubricd_services.memory.embedder import MiniLMEmbedder
from rubricd_services.memory.store import Memory
from rubricd_services.settings import ServiceSettings
from rubricd_testbed.simulator.app import Simulator, serve_in_background
from rubricd_testbed.simulator.faults import SimConfig
from tests import forks
from tests.factories import starter
from tests.threads import one_thread

# Every run ends with where its time went (tests/timing.py); pytester runs a suite of a test's own.
pytest_plugins = ["tests.timing", "pytester"]

REPO = Path(__file__).resolve().parents[1]
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
# The xdist worker this process is (gw0, gw1, ...; 0 without xdist): each draws free ports from a range of its own.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
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
        if not all(_port_free(port) for port in stack.ports.values()):
            lock.close()
            continue
        return stack, lock
    pytest.fail(f"all {SLOTS} test stack slots are held by other pytest sessions", pytrace=False)


def _port_free(port: int) -> bool:
    """No server listens on it (connections of a stopped one, in TIME_WAIT, do not count: servers reuse it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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


def free_port_block(n: int) -> int:
    """The first of N consecutive free loopback ports (Weaviate wants some in pairs), below the
    ephemeral range and away from the ports stack.sh derives (20000-23999); a thousand of them per xdist
    worker, so that two workers never pick the same block."""
    first = 24000 + 1000 * (WORKER % 6)
    for base in random.sample(range(first, first + 1000 - n, n), 40):
        socks = [socket.socket() for _ in range(n)]
        try:
            for i, s in enumerate(socks):
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def _built_python(target: str) -> str:
    """The python `make TARGET-python` names, after `make TARGET` has built it where missing (cached outside the
    repo)."""
    subprocess.run(["make", "-s", target], cwd=REPO, check=True, timeout=1200)
    done = subprocess.run(["make", "-s", "--no-print-directory", f"{target}-python"], cwd=REPO, capture_output=True)
    return done.stdout.decode().strip()


@pytest.fixture(scope="session")
def frameworks_python() -> str:
    """`make frameworks`'s venv: torch, TRL, OpenRLHF's reward client, verl's reward loop."""
    return _built_python("frameworks")


@pytest.fixture(scope="session")
def agents_python() -> str:
    """`make agents`'s venv: OpenPipe ART, verifiers."""
    return _built_python("agents")


@pytest.fixture(scope="session")
def nemo_gym_python() -> str:
    """`make nemo-gym`'s Debian trixie root (Python 3.13, NeMo Gym 0.4.0; built as root, once)."""
    return _built_python("nemo-gym")


@pytest.fixture
def run_framework(stack: Stack, keys: Keys, tmp_path: Path) -> Callable[..., str]:
    """`run_framework(python, script, *args, run=RUN, input=None, **env)`: tests/frameworks/SCRIPT run by PYTHON (a
    framework's venv) against this stack's Redis in the test's namespace (RUBRICD_REDIS_URL, RUBRICD_NAMESPACE,
    RUN_ID), the checkout's shared package on its path, HOME a temporary directory, and ENV; its stdout. A
    script that fails fails the test with its stderr."""

    def run(python: str, script: str, *args: object, run: str, input: str | None = None, **env: str) -> str:
        done = subprocess.run(
            [python, str(REPO / "tests" / "frameworks" / script), *map(str, args)],
            cwd=REPO,  # a framework run in a root of its own (NeMo Gym's) sees the checkout it is run from
            input=input,
            env={
                "PATH": "/usr/bin:/bin",
                **one_thread(),
                "HOME": str(tmp_path),
                "PYTHONPATH": str(REPO / "shared"),
                "RUBRICD_REDIS_URL": stack.redis_url,
                "RUBRICD_NAMESPACE": keys.namespace,
                "RUN_ID": run,
                **env,
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

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


@pytest.fixture
def free_port() -> int:
    """A free loopback port, away from the stacks' ports."""
    return free_port_block(1)


def stack_ports(base: int) -> dict[str, int]:
    """Every port a whole stack (services too) binds, from BASE on: 8 for the servers, the services' above, and
    the local model's last."""
    return {
        "RUBRICD_REDIS_PORT": base,
        "RUBRICD_WEAVIATE_PORT": base + 1,
        "RUBRICD_WEAVIATE_GRPC_PORT": base + 2,
        "RUBRICD_WEAVIATE_GOSSIP_PORT": base + 3,  # data: + 1
        "RUBRICD_WEAVIATE_RAFT_PORT": base + 5,  # raft rpc: + 1
        "RUBRICD_SIMULATOR_PORT": base + 7,
        "RUBRICD_METRICS_BASE_PORT": base
        + 8,  # scorer + 1, summarizer + 2, updater + 3, gateway + 4, comparer + 5, arm + 6, analyzer-i + 10 + i
        "RUBRICD_MODEL_PORT": base + 21,  # the local model's server
    }


@pytest.fixture
def fresh_ports() -> dict[str, int]:
    """Free ports for one more whole stack (servers, and services with two analyzers)."""
    return stack_ports(free_port_block(22))


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


@pytest.fixture(scope="module")
def simulator() -> Iterator[tuple[str, Simulator]]:
    """An in-process LLM simulator on a free port: (base url, the simulator to configure)."""
    with serve_in_background(SimConfig()) as running:
        yield running


@pytest.fixture
def sim(simulator: tuple[str, Simulator]) -> Iterator[Simulator]:
    """The in-process simulator, reset to its defaults after the test."""
    yield simulator[1]
    simulator[1].reset()


@pytest.fixture
async def redis(stack: Stack) -> AsyncIterator[Redis]:
    """A client of the test Redis (bytes in, bytes out) on an empty database."""
    client = Redis.from_url(stack.redis_url, decode_responses=False)
    await client.flushdb()
    yield client
    await client.aclose()


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
def namespace() -> str:
    """A fresh namespace per test: its streams, keys and memory are its own."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture
async def memory(stack: Stack, namespace: str) -> AsyncIterator[Memory]:
    """This test's evaluation memory (the services' collection), deleted afterwards."""
    settings = ServiceSettings(
        namespace=namespace, weaviate_url=stack.weaviate_url, weaviate_grpc_port=stack.weaviate_grpc_port
    )
    memory = await Memory.connect(settings, MiniLMEmbedder())
    yield memory
    await memory.drop()
    await memory.close()


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


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM (a CI timeout, `kill`) ends the session like Ctrl-C does, so
    # the session's finalizers still take the stack down.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# The directories whose modules take minutes each (whole stacks, trainers, the demo): run first, so that under
# xdist the short modules fill the workers around them instead of waiting behind them at the end.
FIRST = ("tests/system/", "tests/demo/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
    first = tuple(str(config.rootpath / d) for d in FIRST)
    items.sort(key=lambda item: not str(item.path).startswith(first))


@pytest.fixture
def metric() -> Callable[..., float]:
    """metric(page, name, **labels): the sum of the samples of NAME whose labels include LABELS, in a /metrics page."""

    def value(page: str, name: str, **labels: str) -> float:
        return sum(
            s.value
            for family in text_string_to_metric_families(page)
            for s in family.samples
            if s.name == name and labels.items() <= s.labels.items()
        )

    return value
