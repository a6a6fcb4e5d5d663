"""Canaries during training: the drift rule by hand, and on the stack a judge that starts flipping its verdicts
mid-run caught at the step it starts, with the step's rollouts untouched, and a rollout answered while its step's
canaries are still being judged."""

import json
import subprocess
import time

import httpx
import msgspec
import pytest

from rubricd import RubricdClient, wire
from rubricd.keys import CANARIES
from rubricd.messages import (
    Action,
    Candidate,
    Event,
    EventKind,
    JudgeStatus,
    Rollout,
    Rubric,
    RubricModification,
    ScoredRollout,
)
from rubricd_services.judges.evaluation.canaries import (
    Rule,
    Shadowed,
    baseline,
    beside,
    outcome,
    pick,
    starts_drift,
)
from rubricd_services.judges.evaluation.labelled import Item
from rubricd_services.judges.evaluation.run import Judged
from rubricd_services.state.canaries import CLAIMED, CanaryStep, drifting_since, read
from tests import forks
from tests.factories import configure_llm, rollout, rubric_set

RULE = Rule(floor=0.6, margin=0.15, baseline_steps=2)
CORRECT = Rubric(
    id="correct", criterion="The response states the correct final answer, matching the reference.", points=5
)


def item(i: int, right: bool) -> Item:
    a, b = 10 + i, 20 + i
    said = a + b if right else a + b + 1
    return Item(
        id=f"sum-{i}",
        prompt=f"What is {a} + {b}?",
        response=f"{a} + {b} = {said}. The answer is {said}.",
        reference=str(a + b),
        rubrics=[CORRECT],
        labels={"correct": right},
    )


def judged(labels: dict[str, bool], verdicts: dict[str, bool], error: str | None = None) -> Judged:
    return Judged(
        item_id="x", labels=labels, meta_classes={r: "accuracy" for r in labels}, verdicts=verdicts, error=error
    )


def canary(step: int, agreement: float | None, drift: bool = False) -> CanaryStep:
    return CanaryStep(step=step, rubric_version=1, items=[], verdicts=4, agreed=0, agreement=agreement, drift=drift)


def test_each_step_takes_the_next_items_of_the_set_around_its_end():
    items = [item(i, True) for i in range(5)]
    assert [i.id for i in pick(items, 0, 2)] == ["sum-0", "sum-1"]
    assert [i.id for i in pick(items, 2, 2)] == ["sum-4", "sum-0"]
    assert [i.id for i in pick(items, 7, 9)] == [f"sum-{n}" for n in range(5)]  # never more than the set


def test_the_baseline_is_the_mean_of_the_runs_first_canary_steps_once_there_are_enough():
    assert baseline([canary(0, 0.9)], 2) is None
    assert baseline([canary(0, 0.9), canary(1, None), canary(2, 0.7), canary(3, 0.1)], 2) == pytest.approx(0.8)


def test_drift_is_below_the_floor_or_more_than_the_margin_below_the_baseline():
    earlier = [canary(0, 1.0), canary(1, 0.9)]  # baseline 0.95
    right, wrong = {"correct": True}, {"correct": False}
    met = [judged(right, right)] * 3 + [judged(right, wrong)]  # 3 of 4: 0.75, 0.2 below the baseline
    step = outcome(2, 3, met, earlier, RULE)
    assert (step.agreement, step.verdicts, step.agreed, step.baseline, step.drift) == (0.75, 4, 3, 0.95, True)
    assert outcome(2, 3, [judged(right, right)] * 4, earlier, RULE).drift is False
    # Before the baseline: the floor alone.
    assert outcome(0, 1, met, [], RULE).drift is False
    assert outcome(0, 1, [judged(right, wrong)] * 2 + met[:1], [], RULE).drift is True
    # A failed call is no verdict, and counted.
    failed = outcome(2, 3, [judged(right, {}, error="timed out"), *met[:2]], earlier, RULE)
    assert (failed.verdicts, failed.failures, failed.agreement) == (2, 1, 1.0)
    assert outcome(2, 3, [judged(right, {}, error="timed out")], earlier, RULE).drift is False  # no figure


def test_with_a_candidate_in_shadow_each_item_is_judged_again_with_its_rubrics_beside_its_own():
    sharper = Rubric(id="correct", criterion="The final answer is right and stated once.", points=5)
    no_padding = Rubric(id="no_padding", criterion="The response pads its answer with filler.", points=-4)
    c = Candidate(
        run_id="run",
        step=2,
        until=3,
        base_version=1,
        rubrics=rubric_set(sharper, no_padding, version=2),
        modifications=[
            RubricModification(action=Action.MODIFY, rationale="sharper", rubric_id="correct", rubric=sharper),
            RubricModification(action=Action.ADD, rationale="padding", rubric_id="no_padding", rubric=no_padding),
        ],
    )
    plain = item(0, True)
    both = beside(plain, c)
    assert [(r.id, r.criterion) for r in both.rubrics] == [
        ("correct", CORRECT.criterion),
        ("correct~c", sharper.criterion),
        ("no_padding", no_padding.criterion),
    ]
    assert both.labels == plain.labels and both.response == plain.response
    # An id of the item's own is never taken by a candidate's rubric.
    own = msgspec.structs.replace(plain, rubrics=[CORRECT, msgspec.structs.replace(no_padding, points=-1)])
    assert [r.id for r in beside(own, c).rubrics] == ["correct", "no_padding", "correct~c", "no_padding~c"]
    # The step's record: the agreement alone decides drift; the same items with the candidate are counted apart.
    right = {"correct": True}
    with_it = [judged(right, {"correct": False, "correct~c": True}), judged(right, right)]
    step = outcome(3, 1, [judged(right, right)] * 2, [], RULE, Shadowed(2, with_it))
    assert (step.agreement, step.drift, step.candidate_step) == (1.0, False, 2)
    assert (step.candidate_verdicts, step.candidate_agreed, step.candidate_agreement) == (2, 1, 0.5)
    assert outcome(3, 1, [judged(right, right)], [], RULE).candidate_agreement is None


def test_judge_drift_fires_where_a_drift_begins_not_at_every_step_of_it():
    steps = [canary(0, 1.0), canary(1, 0.2, True), canary(2, 0.2, True), canary(3, 1.0), canary(4, 0.1, True)]
    assert [starts_drift(c, steps[:i]) for i, c in enumerate(steps)] == [False, True, False, False, True]
    assert drifting_since(steps) == 4 and drifting_since(steps[:3]) == 1 and drifting_since(steps[:4]) is None
    # Steps recorded out of order: step 2 after step 3, both drifting; step 3's event said it, step 2's does not.
    assert starts_drift(canary(2, 0.2, True), [canary(1, 1.0), canary(3, 0.2, True)]) is False
    assert starts_drift(canary(2, 0.2, True), [canary(1, 1.0), canary(3, 1.0)]) is True


async def events(redis, keys, kind: EventKind) -> list[Event]:
    found = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    return [e for e in found if e.kind == kind]


@pytest.mark.integration
async def test_a_judge_that_starts_flipping_mid_run_is_caught_at_that_step_and_the_rollouts_are_untouched(
    stack, redis, keys, start_service, tmp_path, eventually, service_env, fresh_ports, metric
):
    labelled = tmp_path / "canaries.jsonl"
    labelled.write_text("\n".join(msgspec.json.encode(item(i, i % 2 == 0)).decode() for i in range(6)))
    port = fresh_ports["RUBRICD_METRICS_BASE_PORT"]
    start_service(
        "scorer", canary_set=labelled, canary_items=2, canary_baseline_steps=2, judge_cache_ttl_s=0, metrics_port=port
    )
    scored: list[Rollout] = []
    try:
        async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
            for step in range(5):
                if step == 3:
                    await configure_llm(stack, flip_rate=1.0)  # from step 3 on, every verdict is the wrong one
                batch = [
                    rollout(
                        rollout_id=f"s{step}-{i}",
                        step=step,
                        prompt="What is 17 + 25?",
                        response=f"17 + 25 = 42. ({i})",
                        reference="42",
                    )
                    for i in range(3)
                ]
                scores = await client.score(batch, timeout=60)
                assert all(s.status is JudgeStatus.OK for s in scores)
                scored += batch

                async def judged(step: int = step) -> bool:
                    return any(e.step == step for e in await events(redis, keys, EventKind.CANARIES_JUDGED))

                await eventually(judged, f"the canaries of step {step}")
    finally:
        await configure_llm(stack, flip_rate=0.0)
    steps = await read(redis, keys, "run")
    assert [(c.step, c.agreement, c.drift) for c in steps] == [
        (0, 1.0, False),
        (1, 1.0, False),
        (2, 1.0, False),
        (3, 0.0, True),
        (4, 0.0, True),
    ]
    assert [c.items for c in steps[:3]] == [["sum-0", "sum-1"], ["sum-2", "sum-3"], ["sum-4", "sum-5"]]
    assert steps[3].baseline == 1.0 and all(c.rubric_version == 1 for c in steps)
    [drift] = await events(redis, keys, EventKind.JUDGE_DRIFT)
    assert (drift.service, drift.run_id, drift.step) == ("scorer", "run", 3)
    assert "below the floor 0.6 (canary_floor)" in drift.detail, drift.detail
    # The step's rollouts: scored and handed on, and nothing else (no canary is a rollout of a step).
    handed_on = [
        wire.decode(wire.payload(f), ScoredRollout).score.rollout_id for _, f in await redis.xrange(keys.scored)
    ]
    assert sorted(handed_on) == sorted(r.rollout_id for r in scored)
    # Their calls are counted apart, under the agent `canary`: two items a step, five steps.
    usage = {k.decode(): int(v) for k, v in (await redis.hgetall(keys.usage("run"))).items()}
    assert sum(n for k, n in usage.items() if k.startswith("canary:") and k.endswith(":calls")) == 10
    assert sum(n for k, n in usage.items() if k.startswith("judge:") and k.endswith(":calls")) == len(scored)
    # /metrics, rubricd status and rubricd judge canaries say so.
    async with httpx.AsyncClient() as http:
        page = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert metric(page, "rubricd_canary_step", run_id="run") == 4
    assert metric(page, "rubricd_canary_agreement", run_id="run") == 0.0
    assert metric(page, "rubricd_judge_drift", run_id="run") == 1
    env = {**service_env}
    status = forks.run("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    [run] = json.loads(status.stdout)["canaries"]
    assert (run["step"], run["agreement"], run["judged_steps"], run["drift_since"]) == (4, 0.0, 5, 3)
    shown = forks.run("judge", "canaries", "run", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "judge drift since step 3" in shown.stdout, shown.stdout


@pytest.mark.integration
async def test_a_run_names_its_own_canary_set_and_a_bad_one_is_refused_with_its_line(
    stack, redis, keys, start_service, tmp_path, eventually, service_env
):
    def rubricd(*args: str) -> subprocess.CompletedProcess[str]:
        return forks.run("judge", "canaries", *args, env=service_env, timeout=60)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        msgspec.json.encode(item(0, True)).decode()
        + '\n{"id": "x", "prompt": "p", "rubrics": [{"id": "c", "criterion": "c", "points": 1}], "labels": {"c": true}}\n'
    )
    refused = rubricd("own", str(bad))
    assert refused.returncode == 1 and f"{bad}:2: " in refused.stderr and "`$.response`" in refused.stderr, refused
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    refused = rubricd("own", str(empty))
    assert refused.returncode == 1 and "no labelled item" in refused.stderr, refused
    assert await redis.get(keys.canary_set("own")) is None

    own = tmp_path / "own.jsonl"
    own.write_text("\n".join(msgspec.json.encode(item(i, True)).decode() for i in (7, 8)))
    assert rubricd("own", str(own)).returncode == 0
    start_service("scorer", canary_items=4)  # no RUBRICD_CANARY_SET: only runs with a set of their own
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        for run in ("own", "none"):
            asked = rollout(run_id=run, rollout_id="r", reference="4")
            await client.score_one(asked, timeout=60)
    await eventually(lambda: read(redis, keys, "own"), "the canaries of run own")
    [step] = await read(redis, keys, "own")
    assert (step.items, step.verdicts, step.agreement) == (["sum-7", "sum-8"], 2, 1.0)  # the set had 2 items
    assert await read(redis, keys, "none") == []
    assert rubricd("own", "--clear").returncode == 0 and await redis.get(keys.canary_set("own")) is None


@pytest.mark.integration
async def test_a_rollout_is_answered_while_its_steps_canaries_are_still_being_judged(
    stack, redis, keys, start_service, tmp_path, eventually
):
    """The canaries read the scorers' events in their own consumer group: a rollout's score never waits on them,
    here on a canary call that the LLM holds (`[sim:fail=timeout]`): the rollout that starts them is answered."""
    held = msgspec.structs.replace(item(0, True), response="[sim:fail=timeout] 10 + 20 = 30. The answer is 30.")
    labelled = tmp_path / "held.jsonl"
    labelled.write_text(msgspec.json.encode(held).decode())
    start_service("scorer", canary_set=labelled, canary_items=1, judge_cache_ttl_s=0, graceful_timeout_s=1)
    asked = rollout(rollout_id="a", reference="4")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        started = time.monotonic()
        assert (await client.score_one(asked, timeout=60)).status is JudgeStatus.OK
        assert time.monotonic() - started < 15

    async def claimed() -> bool:
        return bool(await redis.hexists(keys.canary_marks("run"), CLAIMED + b"0"))

    await eventually(claimed, "the canaries of step 0 claimed")
    # Still being judged: the canaries' group holds the canary-steps entry that started them, and no step is recorded.
    [group] = [g for g in await redis.xinfo_groups(keys.canary_steps) if g["name"] == CANARIES.encode()]
    assert group["pending"] >= 1, group
    assert await read(redis, keys, "run") == []
    assert not await events(redis, keys, EventKind.CANARIES_JUDGED)
