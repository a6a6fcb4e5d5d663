"""The summarizer service against the real Redis, Weaviate and the LLM simulator."""

import asyncio
import os
import time
from collections import Counter

import httpx
import msgspec
import pytest

from rubricd import RubricdClient, wire
from rubricd.keys import SUMMARIZERS
from rubricd.messages import (
    DeadLetter,
    Event,
    HackingEvidence,
    RolloutAnalysis,
    RubricHealth,
    RubricResult,
    ScoredRollout,
    StepClosed,
    StepSummary,
)
from rubricd_services.analyzer.handler import memory_item
from rubricd_services.memory.store import MemoryKind
from rubricd_services.state import health
from rubricd_services.state.rubric_sets import RubricStore
from tests import factories, forks
from tests.factories import rollout, rubric, rubric_set

pytestmark = pytest.mark.integration

RUBRICS = [rubric("correct")]
PADDED = "17 + 25 = 42. " + "To be thorough, let me restate the whole calculation once more. " * 10


def scored(run_id: str, i: int, response: str, step: int = 0) -> ScoredRollout:
    """Rollout I of STEP answering "What is 17 + 25?" with RESPONSE, scored with `correct` met."""
    of = rollout(i, run_id=run_id, step=step, prompt="What is 17 + 25?", response=response, reference="42")
    return factories.scored(of, results=[RubricResult(rubric_id="correct", met=True, points=5)])


def analysis(
    run_id: str, step: int, i: int, *hacks: str, instance: str | None = None, note: str = ""
) -> RolloutAnalysis:
    return RolloutAnalysis(
        run_id=run_id,
        rollout_id=f"s{step}-r{i}",
        step=step,
        rubric_version=1,
        quality="q",
        instance_key=instance,
        reward_hacking=[HackingEvidence(type=h, evidence="quoted") for h in hacks],
        observations=[note] if note else [],
    )


async def record(redis, keys, memory, analyses: list[RolloutAnalysis]) -> bytes:
    """What an analyzer does: memory first, then the announcement. Returns the last announcement's entry id."""
    await memory.put([memory_item(a) for a in analyses])
    for a in analyses:
        entry_id = await redis.xadd(keys.analyses, wire.entry(a))
    return entry_id


async def close(redis, keys, run_id: str, step: int, rollouts: int, ids: list[str] = ()) -> bytes:
    return await redis.xadd(
        keys.steps, wire.entry(StepClosed(run_id=run_id, step=step, rollouts=rollouts, rollout_ids=list(ids)))
    )


async def summaries(redis, keys, n: int, timeout: float = 60) -> list[StepSummary]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [wire.decode(wire.payload(f), StepSummary) for _, f in await redis.xrange(keys.summaries)]
        if len(found) >= n:
            return found
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{len(found)} of {n} step summaries")


async def test_a_closed_step_is_summarized_once_in_chunks_naming_the_hack(
    stack, redis, keys, memory, start_analyzer, start_summarizer, drained
):
    start_analyzer().wait_consuming(stack.redis_url, keys)
    start_summarizer(chunk_size=3).wait_consuming(stack.redis_url, keys)
    await RubricStore(redis, keys).seed(rubric_set(*RUBRICS))
    for i, response in enumerate([PADDED, PADDED, "17 + 25 = 42.", PADDED]):
        await redis.xadd(keys.scored, wire.entry(scored("run", i, response)))
    await close(redis, keys, "run", 0, rollouts=4)
    [summary] = await summaries(redis, keys, 1)
    assert (summary.step, summary.analyses, summary.chunks, summary.missing_rollouts) == (0, 4, 2, [])
    assert {p.type: p.rollouts for p in summary.reward_hacking} == {"padding": 3}
    assert "padding in 3 of 4 rollouts" in summary.executive_summary
    assert any("padded" in line for line in summary.evolution_plan) and "padded" in summary.memory_entry
    assert await memory.count("run", MemoryKind.CHUNK_SUMMARY) == 2
    [stored] = await memory.recent("run", MemoryKind.STEP_SUMMARY, limit=5)
    assert wire.decode(stored.message, StepSummary) == summary and stored.step == 0
    again = await close(redis, keys, "run", 0, rollouts=4)  # the trainer closes it again
    # A negative check, once the closure was handled: no second summary follows.
    await drained(redis, keys.steps, SUMMARIZERS, again)
    assert await redis.xlen(keys.summaries) == 1
    assert not await redis.zcard(keys.open_steps)


async def test_a_step_whose_analyses_never_all_arrive_is_summarized_at_its_deadline(
    stack, redis, keys, memory, start_summarizer, drained
):
    start_summarizer(step_deadline_s=3, sweep_interval_s=0.2).wait_consuming(stack.redis_url, keys)
    await record(redis, keys, memory, [analysis("run", 1, 0, "sycophancy"), analysis("run", 1, 1)])
    closed_at = time.monotonic()
    await close(redis, keys, "run", 1, rollouts=3, ids=["s1-r0", "s1-r1", "s1-r2"])
    [summary] = await summaries(redis, keys, 1, timeout=30)
    assert time.monotonic() - closed_at >= 2.5
    assert summary.missing_rollouts == ["s1-r2"] and summary.analyses == 2 and summary.expected_rollouts == 3
    assert {p.type: p.rollouts for p in summary.reward_hacking} == {"sycophancy": 1}
    # A late analysis changes nothing: the step was summarized.
    late = await record(redis, keys, memory, [analysis("run", 1, 2)])
    await drained(redis, keys.analyses, SUMMARIZERS, late)  # a negative check, once it was handled: no second summary
    assert await redis.xlen(keys.summaries) == 1


async def test_a_step_does_not_wait_its_deadline_for_an_analysis_that_was_given_up_on(
    stack, redis, keys, memory, start_analyzer, start_summarizer
):
    # The analyst's output for this rollout is always malformed: its entry is dead-lettered after max_failures.
    start_analyzer(reclaim_idle_ms=300, max_failures=2, llm__max_retries=0).wait_consuming(stack.redis_url, keys)
    start_summarizer(step_deadline_s=600, sweep_interval_s=0.2).wait_consuming(stack.redis_url, keys)
    await RubricStore(redis, keys).seed(rubric_set(*RUBRICS))
    for i, response in enumerate(["17 + 25 = 42.", "17 + 25 = 42. [sim:fail=malformed]", PADDED]):
        await redis.xadd(keys.scored, wire.entry(scored("run", i, response)))
    await close(redis, keys, "run", 0, rollouts=3, ids=["s0-r0", "s0-r1", "s0-r2"])
    [summary] = await summaries(redis, keys, 1, timeout=60)  # long before the 600 s deadline
    assert summary.missing_rollouts == ["s0-r1"] and summary.analyses == 2
    [letter] = [wire.decode(wire.payload(f), DeadLetter) for _, f in await redis.xrange(keys.dead_letters)]
    assert letter.stream == keys.scored and "max_failures=2" in letter.reason


def part(run_id: str, step: int, rank: int, ranks: int, ids: list[str]) -> dict:
    closed = StepClosed(run_id=run_id, step=step, rollouts=len(ids), rollout_ids=ids, part=rank, parts=ranks)
    return wire.entry(closed)


async def test_a_step_closed_by_each_of_several_ranks_is_summarized_once_all_are_in(
    stack, redis, keys, memory, start_summarizer, drained
):
    """Two trainer processes each publish and close their own half of step 0 (rank 1 twice: a retry)."""
    start_summarizer(step_deadline_s=600, sweep_interval_s=0.2).wait_consuming(stack.redis_url, keys)
    analyses = await record(redis, keys, memory, [analysis("run", 0, i) for i in range(4)])
    await redis.xadd(keys.steps, part("run", 0, 1, 2, ["s0-r2", "s0-r3"]))
    retry = await redis.xadd(keys.steps, part("run", 0, 1, 2, ["s0-r2", "s0-r3"]))
    await drained(redis, keys.steps, SUMMARIZERS, retry)
    await drained(redis, keys.analyses, SUMMARIZERS, analyses)
    # A negative check: rank 1's analyses are all in, but rank 0 has not closed its part.
    assert await redis.xlen(keys.summaries) == 0
    await redis.xadd(keys.steps, part("run", 0, 0, 2, ["s0-r0", "s0-r1"]))
    [summary] = await summaries(redis, keys, 1, timeout=30)  # long before the 600 s deadline
    assert (summary.analyses, summary.expected_rollouts, summary.missing_rollouts, summary.missing_parts) == (
        4,
        4,
        [],
        0,
    )
    events = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    [done] = [e for e in events if e.kind == "step_summarized"]
    assert done.fields["parts"] == 2 and done.fields["missing_parts"] == 0


async def test_a_step_whose_rank_never_closes_its_part_is_summarized_at_its_deadline_saying_so(
    stack, redis, keys, memory, start_summarizer
):
    start_summarizer(step_deadline_s=3, sweep_interval_s=0.2).wait_consuming(stack.redis_url, keys)
    await record(redis, keys, memory, [analysis("run", 2, i) for i in range(2)])
    first = time.monotonic()
    await redis.xadd(keys.steps, part("run", 2, 0, 3, ["s2-r0"]))
    await redis.xadd(keys.steps, part("run", 2, 2, 3, ["s2-r1"]))
    [summary] = await summaries(redis, keys, 1, timeout=30)
    assert time.monotonic() - first >= 2.5  # the deadline ran from the first part
    assert (summary.analyses, summary.expected_rollouts, summary.missing_parts) == (2, 2, 1)


def by_closer(run_id: str, step: int, closer: str, ids: list[str]) -> dict:
    return wire.entry(StepClosed(run_id=run_id, step=step, rollouts=len(ids), rollout_ids=ids, closer=closer))


async def test_closers_that_cannot_name_their_part_add_up_and_the_step_waits_its_quiet_time_for_more(
    stack, redis, keys, memory, start_summarizer, drained
):
    """Two reward workers that know neither their rank nor their count (verl's) each close their own half of step
    0, the first twice (a redelivery): the step expects all four, and waits the quiet time after the last closer."""
    quiet = 3
    start_summarizer(step_quiet_s=quiet, sweep_interval_s=0.2).wait_consuming(stack.redis_url, keys)
    analyses = await record(redis, keys, memory, [analysis("run", 0, i) for i in range(4)])
    await drained(redis, keys.analyses, SUMMARIZERS, analyses)
    await redis.xadd(keys.steps, by_closer("run", 0, "worker-a", ["s0-r0", "s0-r1"]))
    again = await redis.xadd(keys.steps, by_closer("run", 0, "worker-a", ["s0-r0", "s0-r1"]))
    await drained(redis, keys.steps, SUMMARIZERS, again)
    second = time.monotonic()
    await redis.xadd(keys.steps, by_closer("run", 0, "worker-b", ["s0-r2", "s0-r3"]))
    [summary] = await summaries(redis, keys, 1, timeout=60)
    assert time.monotonic() - second >= quiet - 0.2  # not before the quiet time after the last closer
    assert (summary.analyses, summary.expected_rollouts, summary.missing_rollouts) == (4, 4, [])
    events = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    [done] = [e for e in events if e.kind == "step_summarized"]
    assert done.fields["closers"] == 2 and "parts" not in done.fields


async def test_a_step_no_closure_closes_is_summarized_after_its_latest_analysis(
    stack, redis, keys, memory, start_summarizer, drained
):
    """Its trainer's processes ended without closing it (Ray's actors need not run atexit)."""
    start_summarizer(unclosed_step_s=2, sweep_interval_s=0.2).wait_consuming(stack.redis_url, keys)
    first = await record(redis, keys, memory, [analysis("run", 5, 0)])
    await drained(redis, keys.analyses, SUMMARIZERS, first)
    latest = time.monotonic()
    await record(redis, keys, memory, [analysis("run", 5, 1)])
    [summary] = await summaries(redis, keys, 1, timeout=60)
    assert time.monotonic() - latest >= 2 - 0.2  # its time runs from the latest analysis
    assert (summary.step, summary.analyses, summary.expected_rollouts) == (5, 2, None)


async def test_a_closure_with_part_but_not_parts_is_dead_lettered(stack, redis, keys, start_summarizer, eventually):
    start_summarizer().wait_consuming(stack.redis_url, keys)
    await redis.xadd(keys.steps, {"__data__": b'{"type":"step_closed","run_id":"run","step":0,"part":1}'})
    letters = await eventually(lambda: redis.xrange(keys.dead_letters), "the closure to be dead-lettered")
    [letter] = [wire.decode(wire.payload(f), DeadLetter) for _, f in letters]
    assert letter.stream == keys.steps and "part and parts go together" in letter.reason


async def test_a_step_closed_without_a_count_is_summarized_at_its_deadline_and_its_state_expires(
    stack, redis, keys, memory, start_summarizer, eventually
):
    start_summarizer(step_deadline_s=2, sweep_interval_s=0.2)
    await record(redis, keys, memory, [analysis("run", 4, 0), analysis("run", 4, 1)])
    await redis.xadd(keys.steps, wire.entry(StepClosed(run_id="run", step=4)))
    [summary] = await summaries(redis, keys, 1, timeout=30)
    assert summary.step == 4 and summary.analyses == 2 and summary.expected_rollouts is None
    # Analyses of a step that is never closed are counted in keys that expire (a week), not kept for ever.
    await record(redis, keys, memory, [analysis("run", 9, 0)])
    await eventually(lambda: redis.exists(keys.step_analyses("run", 9)), "the summarizer to count step 9's analysis")
    assert 0 < await redis.ttl(keys.step_analyses("run", 9)) <= 7 * 86_400
    assert 0 < await redis.ttl(keys.step("run", 4)) <= 7 * 86_400


async def test_per_instance_steps_close_after_rollouts_per_step_with_one_summary_per_instance(
    stack, redis, keys, memory, start_summarizer, drained
):
    start_summarizer(rubrics_mode="per_instance", rollouts_per_step=4).wait_consuming(stack.redis_url, keys)
    three = await record(
        redis,
        keys,
        memory,
        [
            analysis("run", 2, 0, "padding", instance="x"),
            analysis("run", 2, 1, "padding", instance="x"),
            analysis("run", 2, 2, instance="y"),
        ],
    )
    await drained(redis, keys.analyses, SUMMARIZERS, three)  # a negative check, once they were handled
    assert await redis.xlen(keys.summaries) == 0  # 3 of 4: not yet
    await record(redis, keys, memory, [analysis("run", 2, 3, "judge_addressing", instance="y")])
    found = {s.instance_key: s for s in await summaries(redis, keys, 2)}
    assert {k: {p.type: p.rollouts for p in s.reward_hacking} for k, s in found.items()} == {
        "x": {"padding": 2},
        "y": {"judge_addressing": 1},
    }
    assert {s.analyses for s in found.values()} == {2}


async def test_a_summarizer_killed_mid_work_loses_nothing_and_summarizes_every_step_once(
    stack, redis, keys, memory, start_summarizer, eventually
):
    slow = "[sim:latency_ms=2000]"  # every summary call of these steps takes 2 s
    for step in range(3):
        await record(redis, keys, memory, [analysis("run", step, i, "padding", note=slow) for i in range(2)])
        await close(redis, keys, "run", step, rollouts=2)
    settings = dict(claim_ttl_s=4, sweep_interval_s=0.3)
    first = start_summarizer(**settings).wait_consuming(stack.redis_url, keys)

    async def all_claimed() -> bool:
        return all([await redis.hexists(keys.step("run", s), "~claimer") for s in range(3)])

    await eventually(all_claimed, "the summarizer to claim all 3 steps", every=0.05)
    first.kill()  # SIGKILL with every step claimed and its LLM calls in flight
    assert await redis.xlen(keys.summaries) == 0
    start_summarizer(**settings).wait_consuming(stack.redis_url, keys)
    found = await summaries(redis, keys, 3, timeout=60)
    # A negative check, once all 3 are in: nothing is summarized twice, even after every claim lapsed.
    await asyncio.sleep(settings["claim_ttl_s"] + 1)
    found = [wire.decode(wire.payload(f), StepSummary) for _, f in await redis.xrange(keys.summaries)]
    assert Counter(s.step for s in found) == {0: 1, 1: 1, 2: 1}
    assert all(s.analyses == 2 and s.reward_hacking[0].type == "padding" for s in found)
    assert await memory.count("run", MemoryKind.STEP_SUMMARY) == 3


async def test_a_failed_summary_is_retried_and_then_published_once(
    stack, redis, keys, memory, start_summarizer, drained
):
    # The first 2 attempts of this conversation fail with 500: with one retry, the whole first try fails.
    flaky = "[sim:fail=500,times=2]"
    start_summarizer(retry_after_s=1, sweep_interval_s=0.2, llm__max_retries=1).wait_consuming(stack.redis_url, keys)
    analyzed = await record(redis, keys, memory, [analysis("run", 5, 0, "padding", note=flaky)])
    closed = await close(redis, keys, "run", 5, rollouts=1)
    [summary] = await summaries(redis, keys, 1, timeout=30)
    assert summary.step == 5 and summary.reward_hacking[0].type == "padding"
    events = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    assert [e.kind for e in events if e.kind in ("summary_failed", "step_summarized")] == [
        "summary_failed",
        "step_summarized",
    ]
    await drained(redis, keys.analyses, SUMMARIZERS, analyzed)  # a negative check, once the retry was summarized
    await drained(redis, keys.steps, SUMMARIZERS, closed)  # and every entry of the step handled: no second summary
    assert await redis.zcard(keys.open_steps) == 0  # left with the summary's commit: the sweep has nothing to retry
    assert await redis.xlen(keys.summaries) == 1


async def test_a_step_summary_holds_the_rubric_health_of_every_first_ok_score_of_its_training_rollouts(
    stack, redis, keys, start_service, start_analyzer, start_summarizer, fresh_ports, metric
):
    """Through the real scorer: each rollout's first score is counted in its step's health hash with the score;
    the summarizer puts each rubric's health in the step summary and on its /metrics."""
    port = fresh_ports["RUBRICD_METRICS_BASE_PORT"] + 2
    start_service("scorer")
    start_analyzer().wait_consuming(stack.redis_url, keys)
    start_summarizer(metrics_port=port).wait_consuming(stack.redis_url, keys)
    answers = {"a": ["42", "42", "41", "41"], "b": ["42", "42", "42", "42"]}  # `correct` differs within a only
    batch = [
        rollout(
            run_id="grp",
            rollout_id=f"{group}{i}",
            prompt="What is 17 + 25?",
            response=f"The sum is {answer}.",
            reference="42",
            group=group,
            group_size=4,
        )
        for group, given in answers.items()
        for i, answer in enumerate(given)
    ]
    evaluation = rollout(run_id="grp", rollout_id="eval", prompt="What is 1 + 1?", response="3", evaluation=True)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score([*batch, evaluation], timeout=60)
        again = await client.score_one(msgspec.structs.replace(batch[2], response="The sum is 42."), timeout=30)
        await client.close_step("grp", 0, rollouts=len(batch))
    assert again == scores[2]  # its first score, counted once
    [summary] = await summaries(redis, keys, 1)
    by_id = {h.rubric_id: h for h in summary.health}
    expected = health.health(
        Counter(f for rollout, s in zip(batch, scores) for f in health.increments(s, rollout.group))
    )
    assert summary.health == expected and set(by_id) >= {"correct", "addresses_grader"}
    assert by_id["correct"] == RubricHealth(
        rubric_id="correct", met_rate=0.75, rollouts=8, groups=2, groups_with_spread=1, uninformative=False
    )
    assert by_id["addresses_grader"].met_rate == 0 and by_id["addresses_grader"].uninformative
    async with httpx.AsyncClient() as http:
        page = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert metric(page, "rubricd_rubric_met_rate", run_id="grp", rubric_id="correct") == 0.75
    assert metric(page, "rubricd_rubric_uninformative", run_id="grp", rubric_id="correct") == 0
    assert metric(page, "rubricd_rubric_uninformative", run_id="grp", rubric_id="addresses_grader") == 1


async def test_retention_deletes_older_analyses_after_a_summary_but_never_an_open_steps(
    stack, redis, keys, memory, start_summarizer, eventually
):
    start_summarizer(memory_keep_steps='{"analysis": 1}').wait_consuming(stack.redis_url, keys)
    for step in (0, 1, 2):
        await record(redis, keys, memory, [analysis("run", step, i) for i in range(2)])
    await close(redis, keys, "run", 0, rollouts=2)
    await summaries(redis, keys, 1)  # step 0's own analyses are the last step's: kept
    await close(redis, keys, "run", 1, rollouts=3)  # open, waiting for its third analysis
    await close(redis, keys, "run", 2, rollouts=2)

    async def forgotten() -> list[Event]:
        found = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
        return [e for e in found if e.kind == "memory_forgotten"]

    [event] = await eventually(forgotten, "the retention after step 2's summary")
    assert (event.step, event.fields["analysis"]) == (2, 2) and "before step 1" in event.detail
    kept = await memory.kept("run")
    assert (kept[MemoryKind.ANALYSIS].count, kept[MemoryKind.ANALYSIS].first_step) == (4, 1)  # open step 1 kept
    assert kept[MemoryKind.STEP_SUMMARY].count == 2  # a kind not named: kept for good
    await record(redis, keys, memory, [analysis("run", 1, 2)])
    late = (await summaries(redis, keys, 3))[-1]
    assert (late.step, late.analyses, late.missing_rollouts) == (1, 3, [])  # every analysis of it was there


def test_a_retention_of_the_rubric_history_stops_the_summarizer_with_the_settings_name():
    for keep, why in (
        ('{"rubric_update": 5}', "rubric history"),
        ('{"analysis": 0}', "at least 1"),
        ('{"analyses": 3}', "unknown memory kind 'analyses'"),
    ):
        done = forks.run("serve", "summarizer", env={**os.environ, "RUBRICD_MEMORY_KEEP_STEPS": keep}, timeout=60)
        assert done.returncode != 0 and "RUBRICD_MEMORY_KEEP_STEPS" in done.stderr, done.stderr
        assert why in done.stderr and "Traceback" not in done.stderr
