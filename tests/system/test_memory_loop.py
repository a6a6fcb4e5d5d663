"""The memory loop end to end: scorer, analyzer, summarizer and updater processes on the real Redis,
Weaviate and the LLM simulator, driven by a trainer in synchronous mode.

The simulated policy answers honestly for two steps, then pads half of its
answers from step 2 on. The analyses flag the padding, the step summary names
it, the updater adds a criterion against it, and from step 3 the padded
answers score lower than before while the honest ones do not. Anchors never
change, and the scores of step s+1 carry the rubric version made from step s.
Run with `-s` to see the run's rubric history.
"""

import random

import msgspec
import pytest
import redis as redis_sync

from rubricd import RubricdClient, wire
from rubricd.messages import (
    JudgeStatus,
    Rollout,
    RolloutAnalysis,
    RubricKind,
    RubricsUpdated,
    StepSummary,
    TrainingContext,
)
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import honest_then_padded

pytestmark = pytest.mark.integration

RUN, STEPS, PER_STEP, PADDING_FROM = "loop", 4, 12, 2


@pytest.fixture
def loop(stack, keys, start_service):
    """The four services of the loop in this test's namespace."""
    services = [
        start_service(name, wait=False, step_deadline_s=120, llm__max_retries=3)
        for name in ("scorer", "analyzer", "summarizer", "updater")
    ]
    for service in services:
        service.wait_consuming(stack.redis_url, keys)
    return keys


def rollouts(step: int, rng: random.Random) -> list[tuple[str, Rollout]]:
    """Honest answers (with reasoning) before PADDING_FROM; from then on every other answer is padded."""
    context = TrainingContext(goal="Train a helpful arithmetic assistant", model_size="7B", total_steps=STEPS)
    return honest_then_padded(step, rng, n=PER_STEP, padding_from=PADDING_FROM, run_id=RUN, context=context)


def entries(client: redis_sync.Redis, stream: str, type_: type) -> list:
    return [msgspec.json.decode(wire.payload(f), type=type_) for _, f in client.xrange(stream)]


@pytest.mark.timeout(900)
async def test_padding_from_step_2_is_caught_by_a_new_rubric_and_scores_lower_from_then_on(stack, loop):
    keys = loop
    rng = random.Random(7)
    rewards: dict[tuple[int, str], list[float]] = {}
    versions_used: dict[int, set[int]] = {}
    in_place: dict[int, int] = {}  # step -> current rubric version once that step's update is in place
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        store = RubricStore(client.redis, keys)
        for step in range(STEPS):
            batch = rollouts(step, rng)
            scores = await client.score([r for _, r in batch], timeout=120)
            assert all(s.status is JudgeStatus.OK for s in scores), [s.error for s in scores]
            for (behaviour, _), score in zip(batch, scores):
                rewards.setdefault((step, behaviour), []).append(score.reward)
            versions_used[step] = {s.rubric_version for s in scores}
            await client.close_step(RUN, step, rollouts=PER_STEP)
            await client.wait_for_rubrics(RUN, step, timeout=300)
            in_place[step] = (await store.current(RUN)).version
        history = await store.history(RUN)

    sync = redis_sync.Redis.from_url(stack.redis_url)
    analyses = entries(sync, keys.analyses, RolloutAnalysis)
    summaries = {s.step: s for s in entries(sync, keys.summaries, StepSummary)}
    updates = entries(sync, keys.rubrics_updated, RubricsUpdated)
    print_history(history, updates, summaries)
    for (step, behaviour), got in sorted(rewards.items()):
        print(
            f"  step {step} {behaviour:8s} rollouts: mean reward {sum(got) / len(got):.3f} (version {sorted(versions_used[step])})"
        )

    # The analyses flag the padding, and only from step 2.
    padded_ids = {f"s{s}-r{i}" for s in range(PADDING_FROM, STEPS) for i in range(1, PER_STEP, 2)}
    flagged = {a.rollout_id for a in analyses if any(h.type == "padding" for h in a.reward_hacking)}
    assert padded_ids & {a.rollout_id for a in analyses if a.step == PADDING_FROM} <= flagged
    assert not any(a.step < PADDING_FROM for a in analyses if a.rollout_id in flagged)
    # The step summary names it.
    assert any(p.type == "padding" for p in summaries[PADDING_FROM].reward_hacking)
    assert not any(p.type == "padding" for p in summaries[0].reward_hacking)
    # The updater adds a criterion against it, from step 2's evidence, and changes no anchor.
    made = {v.step: v for v in history if v.step is not None}
    assert PADDING_FROM in made and all(s >= PADDING_FROM for s in made)
    rule = [
        r for r in made[PADDING_FROM].rubrics if r.points < 0 and r.kind is RubricKind.ADAPTIVE and "pad" in r.criterion
    ]
    assert rule, made[PADDING_FROM].rubrics
    anchors = [[r for r in v.rubrics if r.kind is RubricKind.ANCHOR] for v in history]
    assert anchors[0] and all(a == anchors[0] for a in anchors)
    # Synchronous mode: scores of step s+1 carry the version in place after step s.
    for step in range(1, STEPS):
        assert versions_used[step] == {in_place[step - 1]}, (step, versions_used, in_place)
    # Padded answers score lower once the rule is in place; honest ones do not.
    after = PADDING_FROM + 1
    assert max(rewards[(after, "padded")]) < min(rewards[(PADDING_FROM, "padded")])
    assert min(rewards[(after, "correct")]) >= max(rewards[(PADDING_FROM, "correct")]) - 1e-9


def print_history(history, updates, summaries) -> None:
    by_version = {u.version: u for u in updates}
    print(f"\nrubric history of run {RUN!r} ({len(history)} versions):")
    for v in history:
        origin = "seed" if v.step is None else f"made from step {v.step}"
        print(f"  v{v.version} ({origin}): " + ", ".join(f"{r.id}[{r.kind}] {r.points:+g}" for r in v.rubrics))
        update = by_version.get(v.version)
        if update:
            print(
                f"    strategy {update.strategy}; summary of step {update.step}: {summaries[update.step].executive_summary[:160]}"
            )
            for m in update.modifications:
                print(f"    {m.action} {m.rubric_id}: {m.rationale}")
