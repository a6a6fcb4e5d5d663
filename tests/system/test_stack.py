"""The stack the suite starts is the real thing: Redis with an append-only file,
a Weaviate that stores and searches vectors, the LLM simulator, services that
run the whole loop and report their health and metrics, and a `down` that
leaves nothing behind."""

import json
import socket
import uuid
from pathlib import Path

import httpx
import psutil
import pytest
import weaviate
from redis.asyncio import Redis
from weaviate.classes.config import Configure, DataType, Property

from rubricd import RubricdClient, wire
from rubricd.keys import Keys
from rubricd.messages import StepSummary
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rollout, rubric_set

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


async def test_redis_answers_with_append_only_file(redis: Redis) -> None:
    assert await redis.ping()
    ((name, value),) = (await redis.config_get("appendonly")).items()  # str or bytes, by redis-py version
    assert (name, value) in {("appendonly", "yes"), (b"appendonly", b"yes")}


async def test_a_rubric_set_survives_a_redis_restart(stack, redis: Redis) -> None:
    keys = Keys("restart")
    for version in (1, 2):
        assert await RubricStore(redis, keys).publish(rubric_set(version=version))
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
    with weaviate.connect_to_local(
        host="127.0.0.1", port=stack.weaviate_port, grpc_port=stack.weaviate_grpc_port
    ) as client:
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


def test_down_leaves_nothing_running(start_stack, fresh_ports) -> None:
    base = fresh_ports["RUBRICD_REDIS_PORT"]
    extra = start_stack(fresh_ports, "redis", "weaviate", "simulator")
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


async def test_stack_up_runs_the_whole_loop_with_health_metrics_and_clean_logs(
    start_stack, fresh_ports, metric
) -> None:
    """`stack.sh up` (what `make up` runs): analyzer workers and the summarizer turn a closed step into a summary,
    every service answers /health and counts what it did on /metrics, and no log holds the API key or rollout text."""
    secret = "sk-stacktest-0123456789abcdef"
    local = start_stack(fresh_ports, "redis", "weaviate", "simulator", "services", env={"RUBRICD_LLM__API_KEY": secret})
    status = local.sh("status").stdout
    for name in ("scorer", "summarizer", "updater", "analyzer-1", "analyzer-2"):
        assert any(line.split()[:2] == [name, "up"] for line in status.splitlines()), status
    marker = "Zanzibar-quokka"  # rollout text that must not reach a log
    padded = f"17 + 25 = 42. {marker}. " + "Let me restate the whole calculation once more to be thorough. " * 10
    rollouts = [
        rollout(
            i,
            run_id="stack",
            prompt=f"What is 17 + 25? {marker}",
            reference="42",
            response=padded if i % 2 else "17 + 25 = 42.",
        )
        for i in range(4)
    ]
    keys = Keys()
    async with RubricdClient(local.redis_url) as client:
        scores = await client.score(rollouts, timeout=120)
        await client.close_step("stack", 0, rollouts=len(rollouts))
        await client.wait_for_rubrics("stack", 0, timeout=120)
        [(_, fields)] = await client.redis.xrange(keys.summaries)
    summary = wire.decode(wire.payload(fields), StepSummary)
    assert summary.analyses == 4 and {p.type: p.rollouts for p in summary.reward_hacking}.get("padding") == 2
    assert all(s.status == "ok" for s in scores)

    base = fresh_ports["RUBRICD_METRICS_BASE_PORT"]
    ports = {
        "scorer": base + 1,
        "summarizer": base + 2,
        "updater": base + 3,
        "analyzer-1": base + 11,
        "analyzer-2": base + 12,
    }
    pages = {}
    async with httpx.AsyncClient(timeout=10) as http:
        for name, port in ports.items():
            assert (await http.get(f"http://127.0.0.1:{port}/health")).status_code == 204, name
            pages[name] = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    scorer = pages["scorer"]
    assert metric(scorer, "rubricd_scores_total", status="ok") == 4
    assert metric(scorer, "rubricd_judge_seconds_count") == 4
    assert metric(scorer, "rubricd_reward_count") == 4
    # two contents, each twice: the judge cache judges each once
    assert metric(scorer, "rubricd_llm_calls_total", agent="judge") == 2
    assert metric(scorer, "rubricd_judge_cache_total", result="hit") == 2
    assert metric(scorer, "rubricd_llm_tokens_total", agent="judge", kind="prompt") > 0
    assert metric(scorer, "rubricd_scored_rubric_version", run_id="stack") == 1
    assert metric(scorer, "faststream_received_messages_total", app_name="scorer") >= 4
    analyzers = [pages["analyzer-1"], pages["analyzer-2"]]
    assert sum(metric(p, "rubricd_analyses_total", outcome="announced") for p in analyzers) == 4
    assert sum(metric(p, "rubricd_analyses_flagging_hacking_total") for p in analyzers) >= 2
    assert "rubricd_group_pending{" in analyzers[0] and "rubricd_group_lag{" in analyzers[0]
    assert metric(pages["summarizer"], "rubricd_step_summaries_total", outcome="published") == 1
    assert metric(pages["updater"], "rubricd_step_updates_total") == 1

    logs = {path.name: path.read_text() for path in (local.stack_dir / "logs").glob("*.log")}
    for name in ports:
        lines = [line for line in logs[f"{name}.log"].splitlines() if line.strip()]
        assert lines, name
        assert all(json.loads(line)["level"] for line in lines), name  # structured: one JSON object per line
    for name, text in logs.items():
        assert secret not in text, name
        assert marker not in text, name
