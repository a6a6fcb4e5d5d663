"""The analyzer service against the real Redis, Weaviate and the LLM simulator."""

import asyncio
import socket
import time
from collections import Counter

import pytest

from rubricd import wire
from rubricd.keys import ANALYZERS
from rubricd.messages import (
    DeadLetter,
    Event,
    FunctionSpec,
    RolloutAnalysis,
    RubricResult,
    ScoredRollout,
    Tool,
    Turn,
)
from rubricd_services.memory.store import MemoryKind
from rubricd_services.state.rubric_sets import RubricStore
from tests import factories
from tests.factories import rollout, rubric, rubric_set

pytestmark = pytest.mark.integration

RUBRICS = [rubric("correct"), rubric("shows_reasoning", meta_class="accuracy")]
PADDED = "17 + 25 = 42. " + "To be thorough, let me restate the whole calculation once more. " * 10


def scored(run_id: str, i: int, response: str = "17 + 25 = 42.", step: int = 0) -> ScoredRollout:
    """Rollout I of STEP answering "What is 17 + 25?" with RESPONSE, scored with every rubric met."""
    of = rollout(i, run_id=run_id, step=step, prompt="What is 17 + 25?", response=response, reference="42")
    return factories.scored(of, results=[RubricResult(rubric_id=r.id, met=True, points=r.points) for r in RUBRICS])


async def publish(redis, keys, items: list[ScoredRollout]) -> None:
    await RubricStore(redis, keys).seed(rubric_set(*RUBRICS, run_id=items[0].rollout.run_id))
    for item in items:
        await redis.xadd(keys.scored, wire.entry(item))


async def analyses(redis, keys, n: int, timeout: float = 90) -> list[RolloutAnalysis]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = await redis.xrange(keys.analyses)
        if len(entries) >= n:
            return [wire.decode(wire.payload(f), RolloutAnalysis) for _, f in entries]
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{len(entries)} of {n} analyses")


async def all_acked(redis, keys) -> bool:
    """Every entry of the scored stream read and acked by the analyzers: nothing is left to analyze (again)."""
    [group] = [g for g in await redis.xinfo_groups(keys.scored) if g["name"].decode() == ANALYZERS]
    return group["lag"] == 0 and group["pending"] == 0


async def events(redis, keys, kind: str) -> list[Event]:
    found = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    return [e for e in found if e.kind == kind]


async def test_two_workers_share_a_step_with_no_rollout_analyzed_twice_or_missed(
    stack, redis, keys, memory, start_analyzer, eventually
):
    workers = start_analyzer("--workers", "2", max_records=2, max_in_flight=4)
    workers.wait_consuming(stack.redis_url, keys, ["analyzer-0-w0", "analyzer-0-w1"])
    # Each LLM call takes 100 ms (simulator marker), so one worker cannot drain the stream alone.
    batch = [scored("run", i, f"17 + 25 = 42. [sim:latency_ms=100] ({i})") for i in range(30)]
    await publish(redis, keys, batch)
    got = await analyses(redis, keys, 30)
    await eventually(lambda: all_acked(redis, keys), "every scored rollout acked: nothing more can arrive")
    ids = Counter(
        a.rollout_id
        for a in [wire.decode(wire.payload(f), RolloutAnalysis) for _, f in await redis.xrange(keys.analyses)]
    )
    assert set(ids) == {s.rollout.rollout_id for s in batch} and max(ids.values()) == 1
    assert len(got) == 30
    assert await memory.count("run", MemoryKind.ANALYSIS) == 30
    stored = {item.ref for item in await memory.recent("run", MemoryKind.ANALYSIS, limit=100)}
    assert stored == set(ids)
    by_consumer = Counter(e.fields["consumer"] for e in await events(redis, keys, "rollout_analyzed"))
    assert set(by_consumer) == {"analyzer-0-w0", "analyzer-0-w1"}, by_consumer
    assert (await redis.xpending(keys.scored, ANALYZERS))["pending"] == 0


async def test_a_padded_rollout_is_flagged_with_a_quote_and_a_missing_rubric(
    stack, redis, keys, memory, start_analyzer
):
    start_analyzer().wait_consuming(stack.redis_url, keys)
    await publish(redis, keys, [scored("run", 0, PADDED), scored("run", 1)])
    got = {a.rollout_id: a for a in await analyses(redis, keys, 2)}
    padded, clean = got["s0-r0"], got["s0-r1"]
    [hack] = padded.reward_hacking
    assert hack.type == "padding" and "restate the whole calculation" in hack.evidence
    assert {(f.finding, f.rubric_id) for f in padded.rubric_findings} >= {
        ("missing", None),
        ("gamed", "shows_reasoning"),
    }
    assert padded.quality_score < clean.quality_score and clean.reward_hacking == []
    [hit, *_] = await memory.search(
        "run", "padded filler-heavy repetitive answer", limit=2, kinds=[MemoryKind.ANALYSIS]
    )
    assert hit.item.ref == "s0-r0" and "padding" in hit.item.text
    assert wire.decode(hit.item.message, RolloutAnalysis) == padded


async def test_a_trajectory_is_analysed_turn_by_turn_with_its_tool_use_facts(
    stack, redis, keys, memory, start_analyzer
):
    start_analyzer().wait_consuming(stack.redis_url, keys)
    calc = Tool(function=FunctionSpec(name="calc"))
    of = rollout(
        rollout_id="s0-a0",
        trajectory=[
            Turn(role="user", content="What is 17 + 25?"),
            Turn(role="assistant", content="The calculator returned 43, so the answer is 43."),
        ],
        tools=[calc],
        prompt_turns=1,
        reference="42",
    )
    await publish(redis, keys, [factories.scored(of, reward=0.6, results=[])])
    [analysis] = await analyses(redis, keys, 1)
    evidence = {e.type: e.evidence for e in analysis.reward_hacking}
    assert evidence["fabricated_tool_result"] == "turn 1: The calculator returned 43, so the answer is 43."
    assert evidence["no_tool_call"].startswith("turn 1: ")
    assert "No tool call: the policy answered without calling any of the offered tools." in analysis.observations
    [hit, *_] = await memory.search("run", "fabricated tool result", limit=1, kinds=[MemoryKind.ANALYSIS])
    assert hit.item.ref == "s0-a0" and "turn 1: The calculator returned 43" in hit.item.text


async def test_a_failing_analyst_is_retried_then_dead_lettered(stack, redis, keys, start_analyzer, eventually):
    start_analyzer(reclaim_idle_ms=1000, max_failures=2).wait_consuming(stack.redis_url, keys)
    await publish(redis, keys, [scored("run", 1)])
    await analyses(
        redis, keys, 1
    )  # warm: the embedding model is loaded, so no entry idles for long but the failing one
    await publish(redis, keys, [scored("run", 0, "42 [sim:fail=500]")])
    await eventually(lambda: redis.xlen(keys.dead_letters), "the failing rollout to be dead-lettered")
    # Then nothing is left to deliver again, so no second letter can come.
    await eventually(lambda: all_acked(redis, keys), "every scored rollout acked")
    letters = await redis.xrange(keys.dead_letters)
    assert len(letters) == 1, [wire.decode(wire.payload(f), DeadLetter) for _, f in letters]
    [(_, fields)] = letters
    letter = wire.decode(wire.payload(fields), DeadLetter)
    assert (
        letter.service == "analyzer"
        and "failed 2 of 3 deliveries (max_failures=2)" in letter.reason
        and "500" in letter.reason
    )
    assert wire.decode(letter.payload, ScoredRollout).rollout.rollout_id == "s0-r0"
    assert [a.rollout_id for a in await analyses(redis, keys, 1)] == ["s0-r1"]
    assert (await redis.xpending(keys.scored, ANALYZERS))["pending"] == 0


async def test_an_llm_endpoint_that_is_down_is_waited_out_without_spending_the_entrys_deliveries(
    stack, redis, keys, start_analyzer, eventually
):
    with socket.socket() as s:  # a port where nothing listens: the endpoint is down
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    start_analyzer(reclaim_idle_ms=300, max_failures=1, llm__base_url=down, llm__max_retries=0).wait_consuming(
        stack.redis_url, keys
    )
    await publish(redis, keys, [scored("run", 0)])
    [(entry_id, _)] = await redis.xrange(keys.scored)
    failures = keys.failure(keys.scored, entry_id.decode())

    async def retried() -> bool:  # far past max_failures=1, and still retried
        return int(await redis.hget(failures, "transient") or 0) >= 4

    await eventually(retried, "4 transient failures of the entry")
    assert await redis.hget(failures, "failed") is None and not await redis.xlen(keys.dead_letters)
    assert b"cannot connect" in await redis.hget(failures, "error")
    # The endpoint is back (a worker that reaches it): the same entry is analyzed, nothing dead-lettered.
    start_analyzer(reclaim_idle_ms=300).wait_consuming(stack.redis_url, keys)
    [analysis] = await analyses(redis, keys, 1)
    assert analysis.rollout_id == "s0-r0" and not await redis.xlen(keys.dead_letters)
