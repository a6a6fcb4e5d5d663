"""compose.yaml, run for real: the whole stack from images under Docker Compose, a trainer on the host.

No registry is needed: deploy/docker/images.sh builds the images (a Debian base, stand-ins for Redis and Weaviate,
the project's Dockerfile on the checkout) under rubricd-local/ names, and compose.yaml's image settings point at
them; Compose is `make compose-tools`'s pinned build. The project has its own name and ports, publishes on 127.0.0.1
only, and is removed (`down -v`) however the tests end; a dockerd this module started, it stops. The tests run in
order, each on what the one before left: they are the steps of one operator's session. Each step's time is written
to .stack/artifacts/compose/steps.tsv.
"""

import asyncio
import contextlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import redis as redis_sync
import weaviate
from redis.asyncio import Redis

from rubricd import Rollout, RubricdClient, Score
from rubricd.keys import SCORERS, Keys
from tests.sessions import Session, docker_daemon, sh

# func_only: the first build (several minutes on a fresh machine) has its own deadline, in the fixture.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900, func_only=True)]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "rubricd-compose-test"
PORTS = {  # not stack.sh's defaults, nor the suite's: a `make up` or another test stack may be running
    "RUBRICD_REDIS_PORT": 16399,
    "RUBRICD_WEAVIATE_PORT": 18089,
    "RUBRICD_WEAVIATE_GRPC_PORT": 50071,
    "RUBRICD_SIMULATOR_PORT": 18099,
    "RUBRICD_GATEWAY_PORT": 18300,
    "RUBRICD_DASHBOARD_PORT": 18400,
}
WHEELS_PORT = "18398"  # images.sh's package index: its default (8398) is a port of the suite's stack slots
REDIS_URL = f"redis://127.0.0.1:{PORTS['RUBRICD_REDIS_PORT']}/0"
SERVICES = ["scorer", "comparer", "arm", "analyzer", "summarizer", "updater", "gateway", "dashboard", "simulator"]
RUN = "compose-1"
Settled = Callable[[Redis, float], Awaitable[None]]  # tests/support/waiting.py's `settled`
SESSION = Session(RUN, REDIS_URL, ROOT / ".stack/artifacts/compose")


class Compose:
    """`docker compose -p rubricd-compose-test -f compose.yaml [...]` with the images and ports above."""

    def __init__(self, binary: str, images: dict[str, str]) -> None:
        self.binary = binary
        self.env = {**os.environ, **images, **{k: str(v) for k, v in PORTS.items()}, "RUBRICD_SIM_LATENCY_MS": "100"}
        self.files = ["-f", "compose.yaml"]

    def __call__(self, *args: str, timeout: float = 600) -> str:
        try:
            return sh(self.binary, "-p", PROJECT, *self.files, *args, env=self.env, timeout=timeout)
        except AssertionError as failed:
            logs = subprocess.run(
                [self.binary, "-p", PROJECT, *self.files, "logs", "--tail", "30", "--no-color"],
                capture_output=True, text=True, env=self.env, cwd=ROOT, timeout=60,
            )  # fmt: skip
            raise AssertionError(f"{failed}\n--- the stack's last logs:\n{logs.stdout[-6000:]}") from None

    def up(self) -> None:
        self("up", "-d", "--wait", "--wait-timeout", "400", "--no-build", timeout=480)

    def healthy(self, container: str, within_s: float = 120) -> None:
        """Wait until CONTAINER's health check passes again (after a pause: compose starts nothing that depends on
        a container it last saw unhealthy)."""
        deadline = time.monotonic() + within_s
        while (health := sh("docker", "inspect", "-f", "{{.State.Health.Status}}", container).strip()) != "healthy":
            assert time.monotonic() < deadline, f"{container} not healthy after {within_s:g} s: {health}"
            time.sleep(0.5)

    def states(self) -> dict[str, dict[str, object]]:
        """Each container's `ps` record, by container name (stopped ones included)."""
        rows = [json.loads(line) for line in self("ps", "-a", "--format", "json").splitlines() if line.strip()]
        return {row["Name"]: row for row in rows}

    def leftovers(self) -> list[str]:
        """The project's containers, networks and volumes that Docker still has."""
        label = f"label=com.docker.compose.project={PROJECT}"
        found = []
        for kind in (["ps", "-a"], ["network", "ls"], ["volume", "ls"]):
            found += [f"{kind[0]} {name}" for name in sh("docker", *kind, "-q", "--filter", label).split()]
        return found


@pytest.fixture(scope="module")
def compose() -> Iterator[Compose]:
    SESSION.steps.unlink(missing_ok=True)
    started = time.monotonic()
    with docker_daemon() as started_here:
        SESSION.timed("dockerd (started here)" if started_here else "dockerd (running)", started)
        started = time.monotonic()
        env = {**os.environ, "RUBRICD_WHEELS_PORT": WHEELS_PORT}
        exports = sh("deploy/docker/images.sh", "build", env=env, timeout=1800).split()[1:]  # `export A=x B=y ...`
        SESSION.timed("images built (or found)", started)
        binary = sh("make", "-s", "compose-path").strip()
        assert Path(binary).is_file(), f"no Compose at {binary}: run make compose-tools"
        stack = Compose(binary, dict(pair.split("=", 1) for pair in exports))
        try:
            yield stack
        finally:
            stack.files = ["-f", "compose.yaml"]
            stack("down", "-v", "--remove-orphans", "--timeout", "30")


def memory_objects() -> int:
    """Every object in Weaviate, all collections."""
    client = weaviate.connect_to_local(
        port=PORTS["RUBRICD_WEAVIATE_PORT"], grpc_port=PORTS["RUBRICD_WEAVIATE_GRPC_PORT"]
    )
    try:
        names = client.collections.list_all(simple=True)
        return sum(client.collections.get(name).aggregate.over_all(total_count=True).total_count or 0 for name in names)
    finally:
        client.close()


def get(port_name: str, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORTS[port_name]}{path}", timeout=10) as response:
        return response.status, response.read().decode()


def test_the_stack_comes_up_healthy(compose: Compose) -> None:
    started = time.monotonic()
    compose.up()
    SESSION.timed("up -d --wait", started)
    states = compose.states()
    running = {row["Service"] for row in states.values() if row["State"] == "running"}
    assert running == {"redis", "weaviate", *SERVICES}, states
    assert sum(row["Service"] == "analyzer" for row in states.values()) == 2  # deploy.replicas
    user = sh("docker", "exec", f"{PROJECT}-scorer-1", "id", "-un").strip()
    assert user == "rubricd", "the rubricd image runs as its own unprivileged user"
    assert get("RUBRICD_GATEWAY_PORT", "/health")[0] in (200, 204)
    status, page = get("RUBRICD_DASHBOARD_PORT", "/")
    assert status == 200 and "rubricd" in page


async def test_a_trainer_scores_a_step_and_the_rubrics_update(compose: Compose) -> None:
    started = time.monotonic()
    scores = await SESSION.step(0, 8, "a")
    SESSION.timed("a step scored, closed and its rubric update in place", started)
    assert [s.status for s in scores] == ["ok"] * 8, [s.error for s in scores]
    assert await SESSION.history() == [1, 2], "the step's update made version 2"


async def pending(group: str, stream: str) -> int:
    async with Redis.from_url(REDIS_URL) as redis:
        return int((await redis.xpending(stream, group))["pending"])


@contextlib.asynccontextmanager
async def mid_batch(
    compose: Compose, client: RubricdClient, batch: list[Rollout]
) -> AsyncIterator["asyncio.Task[list[Score]]"]:
    """Publish BATCH with the simulator paused; yield (its scores' task) once the scorer holds some of it, its LLM
    calls hanging, so a fault injected in the body lands mid-batch however busy the machine is; then unpause."""
    compose("pause", "simulator")
    try:
        scores = asyncio.create_task(client.score(batch))
        while not await pending(SCORERS, Keys().rollouts):
            assert not scores.done(), f"the batch ended before the scorer held it: {scores}"
            await asyncio.sleep(0.05)
        yield scores
    finally:
        compose("unpause", "simulator")
    compose.healthy(f"{PROJECT}-simulator-1")  # compose starts nothing whose dependency it last saw unhealthy


async def test_a_scorer_killed_mid_batch_finishes_the_batch_once_restarted(compose: Compose) -> None:
    started = time.monotonic()
    async with RubricdClient(REDIS_URL, timeout=300) as client:
        async with mid_batch(compose, client, SESSION.rollouts(1, 24, "k")) as batch:
            compose("kill", "scorer")
            assert compose.states()[f"{PROJECT}-scorer-1"]["State"] == "exited"
        compose("start", "scorer")
        scores = await batch
    SESSION.timed("24 rollouts, the scorer killed and started mid-batch", started)
    assert sorted(s.rollout_id for s in scores) == sorted(r.rollout_id for r in SESSION.rollouts(1, 24, "k"))
    assert all(s.status == "ok" for s in scores), [s.error for s in scores if s.status != "ok"]
    assert await pending(SCORERS, Keys().rollouts) == 0


async def test_a_redis_restart_loses_nothing(compose: Compose) -> None:
    started = time.monotonic()
    before = await SESSION.history()
    async with RubricdClient(REDIS_URL, timeout=300) as client:
        async with mid_batch(compose, client, SESSION.rollouts(2, 16, "r")) as batch:
            compose("restart", "redis")
        scores = await batch
        await SESSION.close(client, 2, scores)
    SESSION.timed("16 rollouts across a Redis restart, then the step's update", started)
    assert len({s.rollout_id for s in scores}) == 16 and all(s.status == "ok" for s in scores)
    assert (await SESSION.history())[: len(before)] == before, "every version from before the restart is still there"


@pytest.fixture
def keys() -> Keys:
    """The compose stack's namespace (the default), for the suite's fixtures that take `keys` (`settled`)."""
    return Keys()


async def test_down_then_up_keeps_the_run_history(compose: Compose, settled: Settled) -> None:
    async with Redis.from_url(REDIS_URL) as redis:
        await settled(redis, 120)  # every analysis and summary written before counting what memory holds
    versions, objects = await SESSION.history(), memory_objects()
    assert objects > 0, "the analyses and step summaries are in Weaviate"
    started = time.monotonic()
    compose("down", "--timeout", "30")
    assert compose.states() == {}
    compose.up()
    SESSION.timed("down, then up -d --wait on the same volumes", started)
    assert await SESSION.history() == versions
    assert memory_objects() == objects


def test_every_service_stops_gracefully_within_the_grace_period(compose: Compose) -> None:
    started = time.monotonic()
    compose("stop", "--timeout", "30")
    SESSION.timed("stop (every container, SIGTERM)", started)
    exits = {row["Name"]: row["ExitCode"] for row in compose.states().values() if row["Service"] in SERVICES}
    # A service still running when the grace period ends is SIGKILLed: exit 137, not 0.
    assert exits and all(code == 0 for code in exits.values()), f"a service was killed or failed on SIGTERM: {exits}"


async def test_the_secure_overlay_logs_each_service_in_as_its_own_user(compose: Compose, tmp_path: Path) -> None:
    started = time.monotonic()
    compose("down", "-v", "--timeout", "30")
    secrets = tmp_path / "stack"
    sh("deploy/local/stack.sh", "secrets", env={**os.environ, "RUBRICD_STACK_DIR": str(secrets)})
    compose.files = [
        "-f",
        "compose.yaml",
        "-f",
        "compose.secure.yaml",
        "--env-file",
        str(secrets / "secrets/compose.env"),
    ]
    compose.up()
    SESSION.timed("secure overlay: down -v, secrets, up -d --wait", started)
    password = {user: (secrets / f"secrets/redis-{user}").read_text().strip() for user in ("admin", "trainer")}
    port = PORTS["RUBRICD_REDIS_PORT"]
    with pytest.raises(redis_sync.AuthenticationError):
        redis_sync.Redis(port=port).ping()  # no user: the default user is off
    with redis_sync.Redis(port=port, username="admin", password=password["admin"]) as admin:
        users = {client["user"] for client in admin.client_list()}
    assert {"scorer", "comparer", "arm", "analyzer", "summarizer", "updater", "gateway", "cli"} <= users, users
    async with RubricdClient(f"redis://trainer:{password['trainer']}@127.0.0.1:{port}/0", timeout=300) as client:
        scores = await client.score(SESSION.rollouts(0, 4, "s"))
    assert all(s.status == "ok" for s in scores), [s.error for s in scores]


def test_down_v_leaves_nothing_behind(compose: Compose) -> None:
    started = time.monotonic()
    compose.files = ["-f", "compose.yaml"]
    compose("down", "-v", "--timeout", "30")
    SESSION.timed("down -v", started)
    assert compose.leftovers() == []
