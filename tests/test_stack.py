"""The stack the suite starts is the real thing: Redis with an append-only file,
a Weaviate that stores and searches vectors, the LLM simulator, and a `down`
that leaves nothing behind."""

import random
import socket
import uuid
from pathlib import Path

import httpx
import psutil
import pytest
import weaviate
from redis.asyncio import Redis
from weaviate.classes.config import Configure, DataType, Property

from rubricd.keys import Keys
from rubricd.messages import Rubric, RubricSet
from rubricd.store import RubricStore

pytestmark = pytest.mark.integration


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def processes_of(stack_dir: Path) -> list[psutil.Process]:
    """Live processes that stack.sh started for STACK_DIR (they carry its marker)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("RUBRICD_STACK_OWNER") == str(stack_dir) and alive(proc):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def up_in_status(stack) -> list[str]:
    """The components `stack.sh status` reports up."""
    return [line.split()[0] for line in stack.sh("status").stdout.splitlines() if line.split()[1:2] == ["up"]]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_port_block(n: int) -> int:
    """The first of N consecutive free loopback ports (Weaviate wants some in pairs), below the
    ephemeral range and away from the ports stack.sh derives (20000-23999)."""
    for base in random.sample(range(24000, 30000, n), 50):
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


async def test_redis_answers_with_append_only_file(redis: Redis) -> None:
    assert await redis.ping()
    (name, value), = (await redis.config_get("appendonly")).items()  # str or bytes, by redis-py version
    assert (name, value) in {("appendonly", "yes"), (b"appendonly", b"yes")}


async def test_a_rubric_set_survives_a_redis_restart(stack, redis: Redis) -> None:
    keys = Keys("restart")
    rubrics = [Rubric(id="correct", criterion="The answer is correct.", points=5, kind="anchor")]
    for version in (1, 2):
        assert await RubricStore(redis, keys).publish(RubricSet(run_id="run", version=version, rubrics=rubrics))
    await redis.aclose()

    stack.sh("down", "redis")
    assert not port_open(stack.ports["RUBRICD_REDIS_PORT"])
    stack.sh("up", "redis")

    restarted = Redis.from_url(stack.redis_url, decode_responses=False)
    try:
        store = RubricStore(restarted, keys)
        assert (await store.current("run")).version == 2
        assert [s.version for s in await store.history("run")] == [1, 2]
    finally:
        await restarted.aclose()


def test_weaviate_stores_and_searches_vectors(stack) -> None:
    name = f"StackProbe{uuid.uuid4().hex[:8]}"
    with weaviate.connect_to_local(host="127.0.0.1", port=stack.weaviate_port, grpc_port=stack.weaviate_grpc_port) as client:
        assert client.is_ready()
        probes = client.collections.create(
            name,
            vector_config=Configure.Vectors.self_provided(),
            properties=[Property(name="text", data_type=DataType.TEXT)],
        )
        try:
            near = probes.data.insert({"text": "near"}, vector=[1.0, 0.0, 0.0])
            probes.data.insert({"text": "far"}, vector=[0.0, 1.0, 0.0])
            hits = probes.query.near_vector([0.9, 0.1, 0.0], limit=2).objects
            assert [h.uuid for h in hits][0] == near
            assert [h.properties["text"] for h in hits] == ["near", "far"]
        finally:
            client.collections.delete(name)


def test_up_is_idempotent(stack) -> None:
    before = {p.pid for p in processes_of(stack.stack_dir)}
    stack.sh("up", "redis", "weaviate", "simulator")
    assert {p.pid for p in processes_of(stack.stack_dir)} == before


def test_down_leaves_nothing_running(start_stack) -> None:
    base = free_port_block(8)
    ports = {
        "RUBRICD_REDIS_PORT": base,
        "RUBRICD_WEAVIATE_PORT": base + 1,
        "RUBRICD_WEAVIATE_GRPC_PORT": base + 2,
        "RUBRICD_WEAVIATE_GOSSIP_PORT": base + 3,  # data: + 1
        "RUBRICD_WEAVIATE_RAFT_PORT": base + 5,  # raft rpc: + 1
        "RUBRICD_SIMULATOR_PORT": base + 7,
    }
    extra = start_stack(ports, "redis", "weaviate", "simulator")
    started = processes_of(extra.stack_dir)
    assert len(started) >= 3, started
    assert up_in_status(extra) == ["redis", "weaviate", "simulator"]

    extra.sh("down")

    assert processes_of(extra.stack_dir) == []
    assert [p for p in started if alive(p)] == []
    assert [port for port in range(base, base + 8) if port_open(port)] == []
    assert up_in_status(extra) == []


def test_simulator_is_healthy(stack) -> None:
    response = httpx.get(f"http://127.0.0.1:{stack.simulator_port}/health", timeout=5)
    assert response.status_code == 200
