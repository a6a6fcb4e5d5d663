"""Promotion gated end to end: scorer, analyzer, summarizer and updater processes on the real Redis, Weaviate and
the LLM simulator, a trainer in synchronous mode, the run's own promotion set to gated with one shadow step.

The simulated policy answers honestly for two steps, then pads every other answer. The updater's simulator makes
the run's first proposal harmful (the fault `harmful`: its rubric against padding with the sign inverted, paying
it); it is judged in shadow at step 3 without changing a reward there, and the gate rejects it, the version kept.
The next proposal (the usual penalty) is judged in shadow at step 5 and promoted; from step 6 the padded answers
score lower. The run's judge canaries are judged in the shadow steps with and without the candidate's rubrics in
their calls, and the gate's decisions carry both agreements. A scorer and the updater killed in the shadow steps, and every summary delivered again, change none of
it. Run with `-s` to see the run's candidates.
"""

import asyncio
import random
import time

import msgspec
import pytest
import redis as redis_sync

from rubricd import RubricdClient, wire
from rubricd.messages import (
    Candidate,
    Event,
    EventKind,
    Interference,
    JudgeStatus,
    PromotionPlan,
    Rollout,
    Rubric,
    TrainingContext,
)
from rubricd_services.judges.evaluation.labelled import Item
from rubricd_services.state import canaries, promotion
from rubricd_services.state.promotion import Candidates
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import honest_then_padded

pytestmark = pytest.mark.integration

RUN, STEPS, PER_STEP, PADDING_FROM = "gated", 7, 12, 2


@pytest.fixture
def loop(stack, keys, start_service, simulator):
    """The loop's services in this test's namespace; the updater asks an in-process simulator whose first proposal
    of a run is harmful."""
    base_url, sim = simulator
    sim.config = msgspec.structs.replace(sim.config, harmful="inverted")
    services = [
        start_service(name, wait=False, step_deadline_s=120, llm__max_retries=3)
        for name in ("scorer", "analyzer", "summarizer")
    ]
    services.append(start_service("updater", wait=False, llm__max_retries=3, llm__base_url=base_url))
    for service in services:
        service.wait_consuming(stack.redis_url, keys)
    yield keys
    sim.reset()


def rollouts(step: int, rng: random.Random) -> list[tuple[str, Rollout]]:
    context = TrainingContext(goal="Train a helpful arithmetic assistant", model_size="7B", total_steps=STEPS)
    return honest_then_padded(step, rng, n=PER_STEP, padding_from=PADDING_FROM, run_id=RUN, context=context)


def canary_set() -> bytes:
    """Two labelled arithmetic items, one right and one wrong, as `rubricd judge canaries` would set them."""
    correct = Rubric(id="correct", criterion="The response states the correct final answer.", points=5)
    items = [
        Item(
            id=f"sum-{said}",
            prompt="What is 17 + 25?",
            response=f"17 + 25 = {said}.",
            reference="42",
            rubrics=[correct],
            labels={"correct": said == 42},
        )
        for said in (42, 43)
    ]
    return b"\n".join(msgspec.json.encode(i) for i in items)


@pytest.mark.timeout(900)
async def test_a_harmful_proposal_is_rejected_in_shadow_and_the_next_one_promoted(stack, loop, eventually):
    keys = loop
    rng = random.Random(11)
    scored: dict[int, dict[str, list]] = {}
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        await promotion.write_plan(client.redis, keys, RUN, PromotionPlan(promotion="gated", shadow_steps=1))
        await client.redis.set(keys.canary_set(RUN), canary_set())
        store = RubricStore(client.redis, keys)
        for step in range(STEPS):
            batch = rollouts(step, rng)
            scores = await client.score([r for _, r in batch], timeout=120)
            assert all(s.status is JudgeStatus.OK for s in scores), [s.error for s in scores]
            for (behaviour, _), score in zip(batch, scores, strict=True):
                scored.setdefault(step, {}).setdefault(behaviour, []).append(score)
            # The step's canaries are judged beside its rollouts; the gate reads those of its shadow steps.
            await eventually(lambda s=step: canaries.steps(client.redis, keys, RUN, [s]), f"step {step}'s canaries")
            await client.close_step(RUN, step, rollouts=PER_STEP)
            await client.wait_for_rubrics(RUN, step, timeout=300)
        history = await store.history(RUN)
        candidates = await Candidates(client.redis, keys).all(RUN)

    sync = redis_sync.Redis.from_url(stack.redis_url)
    events = [msgspec.json.decode(wire.payload(f), type=Event) for _, f in sync.xrange(keys.events)]
    outcomes = {e.step: e.kind for e in events if e.service == "updater"}
    print(f"\ncandidates of run {RUN!r}:")
    for c in candidates:
        print(f"  proposed at step {c.step} on v{c.base_version}: {c.decision}")

    def rewards(step: int, behaviour: str) -> list[float]:
        return [s.reward for s in scored[step][behaviour]]

    # The harmful proposal (step 2's) is a candidate in shadow at step 3: judged there, never rewarding.
    assert outcomes[PADDING_FROM] == EventKind.RUBRICS_PROPOSED
    shadowed = [s for scores in scored[3].values() for s in scores]
    assert all(s.candidate is not None and s.candidate.step == PADDING_FROM for s in shadowed)
    assert all(s.rubric_version == 1 for s in shadowed)
    assert rewards(3, "padded") == rewards(PADDING_FROM, "padded")  # the trainer's reward is the set in force's
    assert rewards(3, "correct") == rewards(PADDING_FROM, "correct")
    honest_shadow = [s.candidate.reward for s in scored[3]["correct"]]
    assert max(honest_shadow) < min(rewards(3, "correct"))  # the candidate would have lowered the honest answers
    # The gate rejects it at step 3, with its figures; the version stays.
    assert outcomes[3] == EventKind.RUBRICS_REJECTED
    harmful, good = candidates
    assert (harmful.step, harmful.decision.outcome, harmful.decision.step) == (2, "rejected", 3)
    [check] = harmful.decision.checks
    assert not check.passed and check.flagged > 0 and check.honest > 0 and check.honest_delta < 0
    assert all(s.candidate is None for scores in scored[4].values() for s in scores)
    # The next proposal (step 4's) is in shadow at step 5 and promoted there, as version 2 made from step 4.
    assert (outcomes[4], outcomes[5]) == (EventKind.RUBRICS_PROPOSED, EventKind.RUBRICS_PROMOTED)
    assert (good.step, good.decision.outcome, good.decision.version) == (4, "promoted", 2)
    # Each decision carries its shadow step's canaries, judged alone and with the candidate's rubrics in the calls
    # (the simulator decides each rubric alone: no interference, both agree with the labels).
    assert harmful.decision.canaries == Interference(
        steps=[3], verdicts=2, agreement=1.0, with_candidate=1.0, passed=True
    )
    assert good.decision.canaries is not None and good.decision.canaries.steps == [5]
    # The scorers heard of each candidate put in shadow or rejected at once (a promotion is a new version).
    announced = [wire.decode(wire.payload(f), Candidate) for _, f in sync.xrange(keys.rubric_candidates)]
    assert [(c.step, c.decision and c.decision.outcome) for c in announced] == [(2, None), (2, "rejected"), (4, None)]
    judged = [e for e in events if e.kind == EventKind.CANARIES_JUDGED and e.run_id == RUN]
    assert {e.step: e.fields.get("candidate_step") for e in judged} == {
        **dict.fromkeys(range(STEPS)),
        3: PADDING_FROM,
        5: 4,
    }
    assert [v.version for v in history] == [1, 2] and history[1].step == 4
    assert all(s.rubric_version == 1 for scores in scored[5].values() for s in scores)
    assert all(s.rubric_version == 2 for scores in scored[6].values() for s in scores)
    assert max(rewards(6, "padded")) < min(rewards(5, "padded"))  # the padding pays less from then on
    assert min(rewards(6, "correct")) >= max(rewards(5, "correct")) - 1e-9


@pytest.mark.timeout(900)
async def test_a_scorer_and_the_updater_killed_in_a_shadow_window_lose_nothing_and_each_candidate_is_decided_once(
    stack, keys, start_service, simulator, sim
):
    """Two scorers; in each shadow step (3 and 5) one scorer and the updater are SIGKILLed while the step's rollouts
    are being judged and fresh ones started. Then every step summary is delivered to the updater again (as after a
    crash before its ack): nothing is decided twice."""
    base_url, _ = simulator  # `sim`, the same simulator, is reset after the test
    sim.config = msgspec.structs.replace(sim.config, harmful="inverted", latency_ms=150)  # kills land mid-call
    fast = {"reclaim_idle_ms": 2000, "llm__max_retries": 3}
    scorers = [start_service("scorer", wait=False, llm__base_url=base_url, **fast) for _ in range(2)]
    others = [start_service(name, wait=False, step_deadline_s=120, **fast) for name in ("analyzer", "summarizer")]
    updater = start_service("updater", wait=False, llm__base_url=base_url, **fast)
    for service in [*scorers, *others, updater]:
        service.wait_consuming(stack.redis_url, keys)
    run, steps = "gated-kills", 6
    rng = random.Random(13)
    killed = []
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        await promotion.write_plan(client.redis, keys, run, PromotionPlan(promotion="gated", shadow_steps=1))
        store = RubricStore(client.redis, keys)
        for step in range(steps):
            batch = [msgspec.structs.replace(r, run_id=run) for _, r in rollouts(step, rng)]
            scoring = asyncio.ensure_future(client.score(batch, timeout=180))
            if step in (3, 5):  # a shadow step
                await asyncio.sleep(0.4)
                for victim in (scorers.pop(0), updater):
                    victim.kill()
                    killed.append(victim.service)
                scorers.append(start_service("scorer", wait=False, llm__base_url=base_url, **fast))
                updater = start_service("updater", wait=False, llm__base_url=base_url, **fast)
            scores = await scoring
            assert all(s.status is JudgeStatus.OK for s in scores), [s.error for s in scores]
            if step in (3, 5):
                assert all(s.candidate is not None for s in scores)
                shadow = await promotion.read(client.redis, keys, run, step - 1)
                assert sorted(shadow) == sorted(r.rollout_id for r in batch)  # each rollout's shadow score, once
            await client.close_step(run, step, rollouts=PER_STEP)
            await client.wait_for_rubrics(run, step, timeout=300)
        decided = await Candidates(client.redis, keys).all(run)
        history = await store.history(run)
        # Every summary again, as a crashed updater's redelivery would bring it.
        sync = redis_sync.Redis.from_url(stack.redis_url)
        summaries = [f for _, f in sync.xrange(keys.summaries) if b'"run_id":"' + run.encode() in wire.payload(f)]
        [(seen, _)] = sync.xrevrange(keys.events, count=1)  # read after this entry: a trimmed stream's length moves
        for fields in summaries:
            sync.xadd(keys.summaries, fields)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the updater's events for the summaries again, until all are there
            newer = sync.xrange(keys.events, min=b"(" + seen)
            again = [msgspec.json.decode(wire.payload(f), type=Event) for _, f in newer]
            again = [e for e in again if e.service == "updater" and e.run_id == run]
            if len(again) >= len(summaries):
                break
            await asyncio.sleep(0.5)
        assert len(again) >= len(summaries), again
        assert {e.step: e.kind for e in again}[3] == EventKind.RUBRICS_REJECTED
        assert {e.step: e.kind for e in again}[5] == EventKind.RUBRICS_PROMOTED
        assert await Candidates(client.redis, keys).all(run) == decided and await store.history(run) == history
    assert killed == ["scorer", "updater", "scorer", "updater"]
    assert [(c.step, c.decision.outcome, c.decision.step) for c in decided] == [(2, "rejected", 3), (4, "promoted", 5)]
    assert [v.version for v in history] == [1, 2] and history[1].step == 4
