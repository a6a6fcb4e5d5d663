"""The updater service against the real Redis, Weaviate and the LLM simulator."""

import asyncio
import time

import httpx
import msgspec
import pytest

from rubricd import wire
from rubricd.keys import UPDATERS, Keys
from rubricd.messages import Event, HackingPattern, RubricKind, RubricSet, RubricsUpdated, StepSummary
from rubricd_services.memory.store import Memory, MemoryItem, MemoryKind
from rubricd_services.state.rubric_sets import RubricStore

pytestmark = pytest.mark.integration

HACKS = {
    "padding": "Most rollouts were padded, filler-heavy or repetitive responses.",
    "sycophancy": "Several responses flatter the user with sycophantic praise.",
    "none": "Answers were correct and direct.",
}


def summary(run: str, step: int, hack: str, *, extra: str = "", instance: str | None = None) -> StepSummary:
    patterns = [HackingPattern(type=hack, rollouts=5, description=HACKS[hack])] if hack != "none" else []
    return StepSummary(
        run_id=run,
        step=step,
        instance_key=instance,
        executive_summary=HACKS[hack] + extra,
        reward_hacking=patterns,
        memory_entry=f"Step {step}: {HACKS[hack]}",
        analyses=12,
    )


async def remember(memory: Memory, s: StepSummary) -> None:
    """What the analyzer and summarizer leave in memory before the summary is announced."""
    await memory.put(
        [
            MemoryItem(
                kind=MemoryKind.STEP_SUMMARY,
                run_id=s.run_id,
                step=s.step,
                text=s.memory_entry,
                instance_key=s.instance_key,
                message=wire.encode(s),
            ),
            MemoryItem(
                kind=MemoryKind.ANALYSIS,
                run_id=s.run_id,
                step=s.step,
                ref=f"s{s.step}-r1",
                text=f"Rollout s{s.step}-r1: {s.executive_summary}",
            ),
        ]
    )


async def announce(redis, keys: Keys, memory: Memory, s: StepSummary) -> None:
    await remember(memory, s)
    await redis.xadd(keys.summaries, wire.entry(s))


async def wait_step(store: RubricStore, run: str, step: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (done := await store.step(run)) is None or done < step:
        assert time.monotonic() < deadline, f"step marker of {run} did not reach {step}"
        await asyncio.sleep(0.1)


async def wait_all_acked(redis, keys: Keys, entries: int, timeout: float = 90) -> None:
    """Every summary read and acked (the step marker alone can pass a step still being retried)."""
    deadline = time.monotonic() + timeout
    while True:
        [group] = await redis.xinfo_groups(keys.summaries)
        if group["entries-read"] == entries and group["pending"] == 0:
            return
        assert time.monotonic() < deadline, group
        await asyncio.sleep(0.2)


async def events(redis, keys: Keys, kind: str) -> list[Event]:
    found = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    return [e for e in found if e.kind == kind]


async def announced(redis, keys: Keys) -> list[RubricsUpdated]:
    return [wire.decode(wire.payload(f), RubricsUpdated) for _, f in await redis.xrange(keys.rubrics_updated)]


def anchors(rubric_set: RubricSet) -> list:
    return [r for r in rubric_set.rubrics if r.kind is RubricKind.ANCHOR]


async def test_a_summary_naming_padding_adds_a_rule_against_it_and_leaves_anchors_alone(
    stack, redis, keys, memory, start_updater
):
    start_updater()
    store = RubricStore(redis, keys)
    await announce(redis, keys, memory, summary("run", 0, "padding"))
    await wait_all_acked(redis, keys, 1)  # the marker moves before the announcement; the ack is in its MULTI
    seed, evolved = await store.history("run")
    assert (seed.version, evolved.version, evolved.step) == (1, 2, 0)
    assert anchors(seed) == anchors(evolved) and anchors(seed)
    [rule] = [r for r in evolved.rubrics if r.id == "no_padding"]
    assert rule.points < 0 and rule.kind is RubricKind.ADAPTIVE and "pads" in rule.criterion
    [update] = await announced(redis, keys)
    assert (update.version, update.previous_version, update.step, update.strategy) == (2, 1, 0, "corrective")
    assert "summary reports padding" in update.modifications[0].rationale
    [event] = await events(redis, keys, "rubrics_updated")
    assert event.fields["version"] == 2 and event.fields["consulted"]  # the dynamic memory was used and cited
    assert isinstance(event.fields["retrieval_ms"], float) and event.fields["retrieval_ms"] > 0  # it was read
    [record] = await memory.recent("run", MemoryKind.RUBRIC_UPDATE, limit=5)
    assert record.ref == "2" and "added no_padding" in record.text
    assert (await redis.xpending(keys.summaries, UPDATERS))["pending"] == 0


async def test_update_frequency_skips_steps_but_still_advances_the_step_marker(
    stack, redis, keys, memory, start_updater, eventually
):
    start_updater(update_frequency=2)
    store = RubricStore(redis, keys)
    for step, hack in enumerate(["padding", "sycophancy", "sycophancy", "none"]):
        await announce(redis, keys, memory, summary("run", step, hack))
        await wait_step(store, "run", step)
    history = await store.history("run")
    assert [(s.version, s.step) for s in history] == [(1, None), (2, 0), (3, 2)]
    assert "no_flattery" in {r.id for r in history[-1].rubrics}

    async def skipped() -> list[int]:  # the step marker moves just before the step's events are written
        steps = [e.step for e in await events(redis, keys, "update_skipped")]
        return steps if len(steps) >= 2 else []

    assert await eventually(skipped, "two update_skipped events") == [1, 3]


async def test_a_redelivered_summary_whose_version_exists_is_announced_again_not_applied_again(
    stack, redis, keys, memory, start_updater
):
    start_updater()
    store = RubricStore(redis, keys)
    await announce(redis, keys, memory, summary("run", 0, "padding"))
    await wait_step(store, "run", 0)
    await redis.xadd(keys.summaries, wire.entry(summary("run", 0, "padding")))  # as if the first ack was lost
    await announce(redis, keys, memory, summary("run", 1, "none"))
    await wait_all_acked(redis, keys, 3)
    assert [s.version for s in await store.history("run")] == [1, 2]
    first, again = await announced(redis, keys)
    assert again == first
    assert len(await events(redis, keys, "rubrics_reannounced")) == 1


async def test_an_updater_killed_mid_update_applies_every_update_once(
    stack, redis, keys, memory, start_updater, eventually
):
    slow = " [sim:latency_ms=1500]"  # every LLM call about these summaries takes 1.5 s
    settings = {"reclaim_idle_ms": 1000, "update_lock_s": 6}
    doomed = start_updater(**settings)
    store = RubricStore(redis, keys)
    asked = (await sim_stats(stack))["schemas"].get("MemoryQueries", 0)
    for step, hack in enumerate(["padding", "sycophancy", "none"]):
        await announce(redis, keys, memory, summary("run", step, hack, extra=slow))

    async def thinking() -> bool:
        return (await sim_stats(stack))["schemas"].get("MemoryQueries", 0) > asked

    # Inside step 0's update: the query writer answered, the updater agent is thinking (for 1.5 s).
    await eventually(thinking, "the updater's query writer to answer about step 0")
    doomed.kill()
    assert (await redis.xpending(keys.summaries, UPDATERS))["pending"] >= 1
    start_updater(**settings)
    await wait_step(store, "run", 2, timeout=90)
    await wait_all_acked(redis, keys, 3)
    history = await store.history("run")
    # Strictly increasing, no gaps, one version per step (the reclaimed step 0 may land after step 1).
    found = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    assert [s.version for s in history] == [1, 2, 3], [(e.kind, e.step, e.detail[:200], e.fields) for e in found]
    assert sorted(s.step for s in history[1:]) == [0, 1]
    assert {"no_padding", "no_flattery"} <= {r.id for r in history[-1].rubrics}
    assert sorted({u.version for u in await announced(redis, keys)}) == [2, 3]
    assert anchors(history[0]) == anchors(history[-1])
    assert (await redis.xpending(keys.summaries, UPDATERS))["pending"] == 0
    assert await redis.xlen(keys.dead_letters) == 0


async def sim_stats(stack) -> dict:
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{stack.llm_base_url.removesuffix('/v1')}/admin/stats")).json()


async def test_memory_switches_decide_what_the_updater_consults(stack, redis, keys, memory, start_updater):
    start_updater(static_memory="false", dynamic_memory="false")
    store = RubricStore(redis, keys)
    before = (await sim_stats(stack))["schemas"].get("MemoryQueries", 0)
    await announce(redis, keys, memory, summary("run", 0, "padding"))
    await wait_step(store, "run", 0)
    assert (await sim_stats(stack))["schemas"].get("MemoryQueries", 0) == before  # no query writer
    [event] = await events(redis, keys, "rubrics_updated")
    assert event.fields["queries"] == 0 and event.fields["consulted"] == "" and event.fields["retrieval_ms"] == 0
    assert [s.version for s in await store.history("run")] == [1, 2]  # the summary alone still drives the update


async def test_per_instance_mode_updates_the_instance_the_summary_names(stack, redis, keys, memory, start_updater):
    start_updater(rubrics_mode="per_instance")
    store = RubricStore(redis, keys)
    await announce(redis, keys, memory, summary("run", 0, "padding", instance="inst-a"))
    await wait_step(store, "run", 0)
    assert [s.version for s in await store.history("run", "inst-a")] == [1, 2]
    assert await store.current("run") is None and await store.current("run", "inst-b") is None


async def test_a_malformed_summary_is_dead_lettered(stack, redis, keys, memory, start_updater, eventually):
    start_updater()
    await redis.xadd(keys.summaries, {wire.FIELD: b'{"run_id": "run"}'})
    await eventually(lambda: redis.xlen(keys.dead_letters), "the malformed summary to be dead-lettered")
    [(_, fields)] = await redis.xrange(keys.dead_letters)
    assert b"malformed step summary" in fields[wire.FIELD.encode()]
    assert msgspec.json.decode(fields[wire.FIELD.encode()])["service"] == "updater"
