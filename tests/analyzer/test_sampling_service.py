"""The analysis sample by group against the real Redis, Weaviate and the LLM simulator: two analyzers and a
summarizer; the effects' group scripts on their own."""

import asyncio
import time
from collections import Counter

import pytest

from rubricd import wire
from rubricd.keys import ANALYZERS
from rubricd.messages import (
    AnalysisSample,
    EventKind,
    RolloutAnalysis,
    RubricResult,
    ScoredRollout,
    StepClosed,
    StepSample,
    StepSummary,
)
from rubricd_services.analyzer.effects import Effects, GroupRef
from rubricd_services.memory.store import MemoryKind
from rubricd_services.runtime import events
from rubricd_services.state import usage
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import BRIEF, rollout, rubric_set, scored

pytestmark = pytest.mark.integration

RUBRICS = BRIEF[:1]
G = 8


def member(
    run_id: str, i: int, *, sample: AnalysisSample | None, size: int | None = G, response: str = "17 + 25 = 42."
) -> ScoredRollout:
    """Member i of group g0 at step 0, reward i/10: the best is the last, the worst the first."""
    of = rollout(
        i,
        run_id=run_id,
        rollout_id=f"r{i}",
        prompt="What is 17 + 25?",
        response=f"{response} ({i})",
        reference="42",
        group="g0",
        group_size=size,
        analysis_sample=sample,
    )
    return scored(of, reward=i / 10, results=[RubricResult(rubric_id="correct", met=True, points=5)])


async def publish_step(redis, keys, items: list[ScoredRollout]) -> None:
    """The scored group, shuffled as several scorers would commit it, then the trainer's StepClosed."""
    run_id = items[0].rollout.run_id
    await RubricStore(redis, keys).seed(rubric_set(*RUBRICS, run_id=run_id))
    for item in [items[i] for i in (3, 0, 6, 1, 7, 2, 5, 4)[: len(items)]]:
        await redis.xadd(keys.scored, wire.entry(item))
    await redis.xadd(keys.steps, wire.entry(StepClosed(run_id=run_id, step=0, rollouts=len(items))))


async def summary_of(redis, keys, run_id: str, timeout: float = 90) -> StepSummary:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, fields in await redis.xrange(keys.summaries):
            summary = wire.decode(wire.payload(fields), StepSummary)
            if summary.run_id == run_id:
                return summary
        await asyncio.sleep(0.2)
    raise TimeoutError(f"no step summary of {run_id}")


async def analyzed(redis, keys, run_id: str) -> Counter[str]:
    found = [wire.decode(wire.payload(f), RolloutAnalysis) for _, f in await redis.xrange(keys.analyses)]
    return Counter(a.rollout_id for a in found if a.run_id == run_id)


async def analyst_calls(redis, keys, run_id: str) -> int:
    return sum(u.calls for u in await usage.read(redis, keys, run_id) if u.agent == "analyzer")


async def test_a_group_of_8_under_extremes_costs_2_analyses_and_its_summary_says_2_of_8_while_all_is_unchanged(
    stack, redis, keys, memory, start_analyzer, start_service, eventually
):
    analyzers = start_analyzer("--workers", "2", max_records=1, max_in_flight=2)
    analyzers.wait_consuming(stack.redis_url, keys, ["analyzer-0-w0", "analyzer-0-w1"])
    start_service("summarizer")
    await publish_step(redis, keys, [member("ext", i, sample="extremes") for i in range(G)])
    await publish_step(redis, keys, [member("all", i, sample=None) for i in range(G)])  # the default: all
    await publish_step(redis, keys, [member("k3", i, sample=3) for i in range(G)])

    ext = await summary_of(redis, keys, "ext")
    assert ext.sampled == StepSample(rule="extremes", analyzed=2, scored=G)
    assert ext.analyses == 2 and ext.missing_rollouts == [] and ext.expected_rollouts == G
    assert await analyzed(redis, keys, "ext") == {"r0": 1, "r7": 1}  # the worst and the best, once each
    assert await analyst_calls(redis, keys, "ext") == 2
    assert {i.ref for i in await memory.recent("ext", MemoryKind.ANALYSIS, limit=20)} == {"r0", "r7"}

    every = await summary_of(redis, keys, "all")
    assert every.sampled is None and every.analyses == G and every.missing_rollouts == []
    assert await analyst_calls(redis, keys, "all") == G

    k3 = await summary_of(redis, keys, "k3")
    assert k3.sampled == StepSample(rule=3, analyzed=3, scored=G) and k3.missing_rollouts == []
    assert await analyst_calls(redis, keys, "k3") == 3 and len(await analyzed(redis, keys, "k3")) == 3

    async def all_acked() -> bool:
        [group] = [g for g in await redis.xinfo_groups(keys.scored) if g["name"].decode() == ANALYZERS]
        return group["lag"] == 0 and group["pending"] == 0

    await eventually(all_acked, "every scored rollout acked")
    assert await redis.zcard(keys.analysis_groups) == 0  # every group decided


async def test_an_analyzer_killed_while_deciding_a_group_loses_nothing_and_another_decides_it_once(
    stack, redis, keys, start_analyzer, start_service
):
    # Each analysis takes 3 s (simulator marker): the first analyzer is killed while deciding the group; its claim
    # lapses after handler_deadline_s, and the second decides it.
    first = start_analyzer(handler_deadline_s=4)
    first.wait_consuming(stack.redis_url, keys)
    start_service("summarizer")
    slow = "17 + 25 = 42. [sim:latency_ms=3000]"
    await publish_step(redis, keys, [member("run", i, sample="extremes", response=slow) for i in range(G)])
    group = keys.analysis_group("run", 0, "g0")
    deadline = time.monotonic() + 60
    while not await redis.hexists(group, "~claimer"):
        assert time.monotonic() < deadline, "the group was never claimed"
        await asyncio.sleep(0.02)
    first.kill()
    assert not await redis.xrange(keys.analyses)  # killed before it announced anything
    start_analyzer(handler_deadline_s=4).wait_consuming(stack.redis_url, keys)
    summary = await summary_of(redis, keys, "run")
    assert summary.sampled == StepSample(rule="extremes", analyzed=2, scored=G) and summary.missing_rollouts == []
    assert await analyzed(redis, keys, "run") == {"r0": 1, "r7": 1}


async def test_a_group_is_decided_at_its_deadline_and_a_member_arriving_after_is_left_out(
    redis, keys, eventually
) -> None:
    effects = Effects(redis, keys, "analyzer-a", maxlen=1000, deadline_s=0.5, lease_s=60)
    samples, group = effects.samples, GroupRef("run", 0, "g0")
    members = [member("run", i, sample="extremes", size=None) for i in range(4)]
    for m in members[:3]:  # no group_size: never complete, only its deadline decides it
        assert not await effects.gather(m, wire.encode(m), b"1-0")
    assert await samples.due(10) == []
    assert await eventually(lambda: samples.due(10), "the group's deadline", every=0.05) == [group.name]
    claim = await samples.claim(group.name)
    assert claim is not None and claim.members == {m.rollout.rollout_id: wire.encode(m) for m in members[:3]}
    assert await samples.claim(group.name) is None  # held
    best = RolloutAnalysis(run_id="run", rollout_id="r2", step=0, rubric_version=1, quality="q")
    announced = events.event("analyzer", EventKind.ROLLOUT_ANALYZED, run_id="run", step=0, rollout_id="r2")
    assert await effects.decide(group, [best], [announced], given_up=["r0"])
    assert not await effects.decide(group, [best], [announced], given_up=[])  # once
    assert not await effects.gather(members[3], wire.encode(members[3]), b"1-0")
    unsampled = await redis.hgetall(keys.step_unsampled("run", 0))
    assert unsampled == {b"r1": b"extremes", b"r3": b"extremes"}
    assert await redis.smembers(keys.step_given_up("run", 0)) == {b"r0"}
    assert await redis.smembers(keys.step_analyses("run", 0)) == {b"r2"} and await redis.xlen(keys.analyses) == 1
    stored = await redis.hgetall(keys.analysis_group("run", 0, "g0"))
    assert {f: v for f, v in stored.items() if f.startswith(b"m:")} == {b"m:r0": b"", b"m:r1": b"", b"m:r2": b""}
    assert await redis.zcard(keys.analysis_groups) == 0
