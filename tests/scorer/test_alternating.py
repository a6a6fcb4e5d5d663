"""Alternating meta-class rewards against the real Redis: one decision per step, shared and kept."""

import asyncio

import httpx
import msgspec
import pytest

from rubricd import RubricdClient, wire
from rubricd.messages import HEALTHBENCH_AXES, Event, EventKind, JudgeStatus, Rollout, Score
from rubricd_services.state import health
from rubricd_services.state.rubric_sets import RubricStore
from rubricd_services.state.schedule import ClassStats, Decision, Rule, Schedule, parse_stats
from tests.factories import configure_llm, rollout, rubric, rubric_set

pytestmark = pytest.mark.integration

# HealthBench-shaped classes the simulated judge can tell apart; communication_quality has only a negative
# rubric, so it is undefined for every rollout and never scheduled.
RUBRICS = [rubric("correct"), rubric("shows_reasoning", id="steps"), rubric("concise"), rubric("pads")]
CLASSES = ["accuracy", "completeness", "instruction_following"]  # the candidates, in declared order
ANSWERS = [
    "42.",
    "17 + 25 = 42, because 17 + 20 = 37 and then 37 + 5 = 42.",
    "It is 41.",
    "The sum is 42. " + "Let me say it once more to be sure. " * 8,
]


def rollouts(run_id: str, step: int, n: int) -> list[Rollout]:
    return [
        rollout(
            i,
            run_id=run_id,
            step=step,
            prompt="What is 17 + 25?",
            response=ANSWERS[i % len(ANSWERS)],
            reference="42",
        )
        for i in range(n)
    ]


CLASS_OF = {r.id: r.meta_class for r in RUBRICS}


async def seed(redis, keys, run_id: str) -> None:
    assert await RubricStore(redis, keys).publish(rubric_set(*RUBRICS, run_id=run_id))


async def schedule(redis, keys, run_id: str) -> dict[int, Decision]:
    fields = await redis.hgetall(keys.schedule(run_id))
    return {int(s): msgspec.json.decode(raw, type=Decision) for s, raw in fields.items()}


async def selected_events(redis, keys) -> list[Event]:
    events = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    return [e for e in events if e.kind == EventKind.META_CLASS_SELECTED]


def check_rewards(scores: list[Score], undefined: str = "weighted_total") -> None:
    for s in scores:
        assert s.status is JudgeStatus.OK and s.policy == "alternating"
        assert s.undefined_meta_classes == ["communication_quality"]
        assert s.weighted_total is not None
        if s.active_meta_class is None:
            assert s.reward == s.weighted_total
        else:  # the active class's rubrics, and the penalties of the penalty-only classes
            counted = {s.active_meta_class, *s.undefined_meta_classes}
            chosen = [r for r in s.results if CLASS_OF[r.rubric_id] in counted]
            possible = sum(r.points for r in chosen if r.points > 0)
            assert s.reward == pytest.approx(min(1, max(0, sum(r.points for r in chosen if r.met) / possible)))


async def test_two_scorers_scoring_steps_in_parallel_give_each_step_one_class(
    stack, redis, keys, start_scorer, fresh_ports, metric
):
    ports = [fresh_ports["RUBRICD_METRICS_BASE_PORT"] + i for i in (0, 1)]
    settings = {"reward_policy": "alternating", "max_records": 2, "max_in_flight": 8, "judge_cache_ttl_s": 0}
    await seed(redis, keys, "par")
    await configure_llm(stack, latency_ms=20, latency_jitter_ms=20)
    try:
        for port in ports:
            start_scorer(metrics_port=port, **settings)
        batch = [r for step in range(4) for r in rollouts("par", step, 24)]
        async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
            scores = await client.score(batch, timeout=180)
        async with httpx.AsyncClient() as http:
            pages = [(await http.get(f"http://127.0.0.1:{port}/metrics")).text for port in ports]
    finally:
        await configure_llm(stack, latency_ms=0, latency_jitter_ms=0)
    assert all(metric(page, "rubricd_scores_total", status="ok") > 0 for page in pages), "both scorers scored"
    check_rewards(scores)
    by_step = {step: {s.active_meta_class for s in scores if s.step == step} for step in range(4)}
    assert by_step == {0: {"accuracy"}, 1: {"completeness"}, 2: {"instruction_following"}, 3: {"accuracy"}}
    decided = await schedule(redis, keys, "par")
    assert {s: d.meta_class for s, d in decided.items()} == {s: c.pop() for s, c in by_step.items()}
    events = await selected_events(redis, keys)
    assert sorted(e.step for e in events) == [0, 1, 2, 3]  # one per step, from whichever scorer decided it
    assert all(e.fields["meta_class"] == decided[e.step].meta_class for e in events)
    # Each scorer shows one class, that of the latest step it scored; which steps each took is the
    # consumer group's choice, but one of them scored step 3 and so shows its class.
    shown = [
        {c for c in CLASSES if metric(page, "rubricd_active_meta_class", run_id="par", meta_class=c) == 1}
        for page in pages
    ]
    assert all(len(classes) == 1 for classes in shown), shown
    assert {"accuracy"} in shown, shown
    assert all(metric(page, "rubricd_active_meta_class", run_id="par") == 1 for page in pages), "the others read 0"


async def test_a_restarted_scorer_continues_the_schedule(stack, redis, keys, start_scorer):
    settings = {"reward_policy": "alternating", "warmup_steps": 1}
    await seed(redis, keys, "rs")
    first = start_scorer(**settings)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        before = [await client.score(rollouts("rs", step, 4), timeout=60) for step in range(3)]
        first.stop()
        start_scorer(**settings)
        after = [await client.score(rollouts("rs", step, 4), timeout=60) for step in range(3, 6)]
        again = await client.score(rollouts("rs", 1, 6), timeout=60)  # a late rollout of a decided step
    for step_scores in [*before, *after]:
        check_rewards(step_scores)
    classes = [{s.active_meta_class for s in step_scores} for step_scores in [*before, *after]]
    assert classes == [
        {None},
        {"accuracy"},
        {"completeness"},
        {"instruction_following"},
        {"accuracy"},
        {"completeness"},
    ]
    assert again[-2].active_meta_class == again[-1].active_meta_class == "accuracy"
    decided = await schedule(redis, keys, "rs")
    assert [decided[s].reason for s in range(6)] == ["warm_up", *["round_robin"] * 5]


async def test_statistics_are_what_the_committed_scores_imply_and_most_room_reads_them(
    stack, redis, keys, start_scorer
):
    start_scorer(
        reward_policy="alternating", schedule_strategy="most_room", warmup_steps=1, undefined_meta_class_reward="mask"
    )
    await seed(redis, keys, "st")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        warm = await client.score(rollouts("st", 0, 8), timeout=60)
        repeated = await client.score(rollouts("st", 0, 3), timeout=60)  # published again: scored once
        chosen = await client.score(rollouts("st", 1, 4), timeout=60)
    assert repeated == warm[:3]
    expected: dict[str, ClassStats] = {}
    for s in warm:
        for c, v in s.meta_class_scores.items():
            expected[c] = expected.get(c, ClassStats()) + ClassStats(1, v)
    stats = parse_stats(await redis.hgetall(keys.class_stats("st", 0)))
    assert stats.keys() == expected.keys() == set(CLASSES)
    for c in CLASSES:
        assert stats[c].count == expected[c].count == 8
        assert stats[c].total == pytest.approx(expected[c].total)
    decision = (await schedule(redis, keys, "st"))[1]
    means = {c: expected[c].mean for c in CLASSES}
    assert decision.reason == "most_room" and decision.window == [0]
    assert decision.means == pytest.approx(means)
    assert decision.meta_class == min(CLASSES, key=lambda c: (means[c], CLASSES.index(c)))
    assert {s.active_meta_class for s in chosen} == {decision.meta_class}
    check_rewards([*warm, *chosen])
    assert await health.steps(redis, keys, "st") == [0, 1]  # the commits' index of the steps with rubric health
    assert 0 < await redis.ttl(keys.rubric_health_steps("st")) <= 7 * 24 * 3600


async def test_an_undefined_active_class_masks_the_sample(stack, redis, keys, start_scorer):
    start_scorer(reward_policy="alternating", undefined_meta_class_reward="mask")
    await redis.hset(
        keys.schedule("mask"),
        "0",
        msgspec.json.encode(
            Decision(step=0, meta_class="communication_quality", reason="round_robin", strategy="round_robin")
        ),
    )  # decided before (e.g. under another rubric set), and kept
    await seed(redis, keys, "mask")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score(rollouts("mask", 0, 2), timeout=60)
    for s in scores:
        assert s.status is JudgeStatus.OK and s.reward is None and s.masked
        assert s.active_meta_class == "communication_quality" and s.weighted_total is not None
    stats = parse_stats(await redis.hgetall(keys.class_stats("mask", 0)))
    assert (stats["communication_quality"].count, stats["communication_quality"].masked) == (0, 2)  # counted
    assert stats["accuracy"].count == 2 and stats["accuracy"].masked == 0
    assert 0 < await redis.ttl(keys.class_stats("mask", 0)) <= 7 * 24 * 3600


async def test_schedulers_racing_with_different_candidates_agree_on_one_decision(stack, redis, keys):
    """Scorers whose deciding rollouts carry different rubric sets (per-instance) race for one step: one
    decision is written and every one of them returns it, with one event."""
    sets = [["accuracy"], ["completeness"], ["instruction_following", "accuracy"]] * 4
    schedulers = [Schedule(redis, keys, Rule(), HEALTHBENCH_AXES, maxlen=1000) for _ in sets]
    decisions = await asyncio.gather(*(s.active("race", 0, c) for s, c in zip(schedulers, sets)))
    assert len({msgspec.json.encode(d) for d in decisions}) == 1
    stored = (await schedule(redis, keys, "race"))[0]
    assert decisions[0] == stored and stored.meta_class in {"accuracy", "completeness", "instruction_following"}
    assert [e.step for e in await selected_events(redis, keys) if e.run_id == "race"] == [0]
    # a scorer started later, whose rollout has none of that class, still gets it
    late = Schedule(redis, keys, Rule(), HEALTHBENCH_AXES, maxlen=1000)
    assert await late.active("race", 0, ["context_awareness"]) == stored


async def test_a_rollout_may_choose_its_reward_policy_and_an_unknown_one_is_rejected(stack, redis, keys, start_scorer):
    start_scorer()  # the deployment's policy: weighted_sum
    await seed(redis, keys, "own")
    alternating = [msgspec.structs.replace(r, reward_policy="alternating") for r in rollouts("own", 0, 2)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        chosen = await client.score(alternating, timeout=60)
        default = await client.score(rollouts("own", 0, 4)[2:], timeout=60)
        bogus = msgspec.structs.replace(rollouts("own", 0, 5)[4], reward_policy="median")
        rejected = await client.score_one(bogus, timeout=60)
    check_rewards(chosen)
    assert {(s.policy, s.active_meta_class) for s in chosen} == {("alternating", "accuracy")}
    assert all(s.policy == "weighted_sum" and s.active_meta_class is None for s in default)
    assert all(s.reward == s.weighted_total for s in default)
    assert rejected.status is JudgeStatus.REJECTED and "unknown reward_policy 'median'" in rejected.error
