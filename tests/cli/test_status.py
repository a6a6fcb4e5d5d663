"""`rubricd status`: its numbers match what was published, delivered and acked."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from rubricd import RubricdClient, wire
from rubricd.keys import ANALYZERS, SCORERS
from rubricd.messages import HEALTHBENCH_AXES, JudgeStatus, Rollout, RubricResult, Score
from rubricd_services.runtime.consumer_groups import ensure_group
from rubricd_services.state.rubric_sets import RubricStore
from rubricd_services.state.schedule import Rule, Schedule
from tests.factories import count_health, indexed, rollout, rubric_set


def numbered(run: str, i: int) -> Rollout:
    """Rollout i of RUN (id `r<i>`), its response its own: no judge-cache hit between two of them."""
    return rollout(i, run_id=run, rollout_id=f"r{i}", response=f"4 (answer {i})")


def stream(report: dict, name: str) -> dict:
    [found] = [s for s in report["streams"] if s["stream"] == name]
    return found


async def test_status_matches_what_was_published_and_then_scored(
    stack, redis, keys, cli, start_service, wait_len, eventually
):
    await ensure_group(redis, keys.rollouts, SCORERS)
    for i in range(10):
        await redis.xadd(keys.rollouts, wire.entry(numbered("run", i)))

    before = json.loads(cli("status", "--json").stdout)
    rollouts = stream(before, keys.rollouts)
    assert rollouts["length"] == 10
    [group] = rollouts["groups"]
    assert (group["group"], group["pending"], group["lag"], group["consumers"]) == (SCORERS, 0, 10, [])
    assert before["rubrics"] == []

    start_service("scorer", trim_interval_s=3600)  # no trimming: the length stays what was published
    await wait_len(keys.scored, 10)

    def drained() -> dict | None:  # the last ack lands with the last score, in one script
        after = json.loads(cli("status", "--json").stdout)
        [group] = stream(after, keys.rollouts)["groups"]
        return after if group["pending"] == 0 and group["lag"] == 0 else None

    after = await eventually(drained, "`rubricd status` to show the rollouts all acked", every=0.2)
    [group] = stream(after, keys.rollouts)["groups"]
    assert stream(after, keys.rollouts)["length"] == 10
    assert (group["pending"], group["lag"], group["oldest_pending_age_s"]) == (0, 0, None)
    assert {c["name"] for c in group["consumers"]} >= {"scorer-0"}
    assert stream(after, keys.scored)["length"] == 10 and stream(after, keys.scored)["groups"] == []
    [run] = after["rubrics"]
    assert (run["run_id"], run["version"]) == ("run", 1)  # the scorer seeded the run's rubrics

    text = cli("status").stdout
    assert f"namespace {keys.namespace}" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("rollouts "))  # the streams table comes first
    assert line.split()[:6] == ["rollouts", "10", "scorers", str(len(group["consumers"])), "0", "0"]


async def test_status_shows_each_runs_tokens_per_agent_and_their_cost(
    stack, redis, keys, cli, start_service, service_env
):
    start_service("scorer")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        # r1 twice: the second is the judge cache's (a hit, no call, no tokens)
        await client.score([numbered("run", 1), numbered("run", 2)], timeout=30)
        await client.score_one(msgspec.structs.replace(numbered("run", 1), rollout_id="r3"), timeout=30)
        await client.score_one(numbered("other", 1), timeout=30)
    service_env["RUBRICD_PRICES"] = '{"rubricd-simulator": {"prompt_per_mtok": 2000, "completion_per_mtok": 8000}}'

    report = json.loads(cli("status", "--json").stdout)
    other, run = report["usage"]  # by run id
    [judge] = run["agents"]
    assert (run["run_id"], other["run_id"]) == ("run", "other")
    assert (judge["agent"], judge["model"], judge["calls"], judge["cache_hits"]) == ("judge", "rubricd-simulator", 2, 1)
    assert judge["prompt_tokens"] > 0 and judge["completion_tokens"] > 0
    cost = (judge["prompt_tokens"] * 2000 + judge["completion_tokens"] * 8000) / 1e6
    assert judge["cost"] == pytest.approx(cost) and run["cost"] == pytest.approx(cost)

    row = next(ln for ln in cli("status").stdout.splitlines() if ln.startswith("run ") and "judge" in ln).split()
    assert row == ["run", "judge", "rubricd-simulator", "2", "1", str(judge["prompt_tokens"])] + [
        str(judge["completion_tokens"]),
        f"{cost:.4f}",
    ]
    del service_env["RUBRICD_PRICES"]
    assert cli("status", "--json").stdout.count('"cost":null') == 4  # no price: tokens only, for each agent and run


async def test_status_shows_the_active_class_of_each_scheduled_runs_latest_step(stack, redis, keys, cli):
    schedule = Schedule(redis, keys, Rule(warmup_steps=1), HEALTHBENCH_AXES, maxlen=1000)
    for step in (0, 2, 1):  # step 1 late: the latest decided step is 2, decided before it
        await schedule.active("alt", step, HEALTHBENCH_AXES)
    await schedule.active("warming", 0, HEALTHBENCH_AXES)
    await indexed(redis, keys, "alt", "warming")  # scheduled as their first rollouts are scored
    await redis.xadd(keys.rollouts, wire.entry(numbered("unscheduled", 1)))  # a run without a schedule: no row

    report = json.loads(cli("status", "--json").stdout)
    assert report["schedules"] == [
        {
            "run_id": "alt",
            "step": 2,
            "meta_class": "accuracy",  # step 0 is the warm-up; 2 (and then 1) the first step after it
            "reason": "round_robin",
            "strategy": "round_robin",
            "decided_steps": 3,
        },
        {
            "run_id": "warming",
            "step": 0,
            "meta_class": None,
            "reason": "warm_up",
            "strategy": "round_robin",
            "decided_steps": 1,
        },
    ]
    lines = cli("status").stdout.splitlines()
    assert next(ln for ln in lines if ln.startswith("RUN ") and "ACTIVE CLASS" in ln).split()[:5] == [
        "RUN",
        "LATEST",
        "STEP",
        "ACTIVE",
        "CLASS",
    ]
    assert next(ln for ln in lines if ln.startswith("alt ")).split() == ["alt", "2", "accuracy", "round_robin"] + [
        "round_robin",
        "3",
    ]
    assert next(ln for ln in lines if ln.startswith("warming ")).split() == ["warming", "0", "-", "warm_up"] + [
        "round_robin",
        "1",
    ]


async def test_pending_entries_and_their_age_per_group_and_consumer(stack, redis, keys, cli):
    for _ in range(5):
        await redis.xadd(keys.scored, {wire.FIELD: b"{}"})
    await ensure_group(redis, keys.scored, ANALYZERS)
    await redis.xreadgroup(ANALYZERS, "analyzer-a", {keys.scored: ">"}, count=3)  # delivered, never acked
    await asyncio.sleep(0.3)

    report = json.loads(cli("status", "--json").stdout)
    [group] = stream(report, keys.scored)["groups"]
    assert (group["group"], group["pending"], group["lag"]) == (ANALYZERS, 3, 2)
    assert group["consumers"][0]["name"] == "analyzer-a" and group["consumers"][0]["pending"] == 3
    assert group["oldest_pending_age_s"] >= 0.3 and group["oldest_pending_idle_s"] >= 0.3
    assert "analyzer-a" in cli("status").stdout


def test_the_installed_entry_point_runs_and_says_when_to_add_analyzers(stack, redis, service_env):
    rubricd = Path(sys.executable).parent / "rubricd"  # from `pip install -e .`'s [project.scripts]
    done = subprocess.run([str(rubricd), "status"], env=service_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "rollouts" in done.stdout and "no rubric sets" in done.stdout
    help_text = subprocess.run([str(rubricd), "status", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "analyzers" in help_text and "add analyzer workers" in " ".join(help_text.split())


async def test_status_shows_where_the_votes_split_at_each_voted_runs_latest_step(stack, redis, keys, cli):
    """What the scorer's commit adds for scores judged by 3 votes (rubricd_services.state.health.increments), read back."""
    await RubricStore(redis, keys).publish(rubric_set(run_id="voted"))
    for step, agreements in ((0, [1.0, 1.0]), (1, [2 / 3, 1.0, 1 / 3 + 1 / 3])):
        for i, agreement in enumerate(agreements):
            result = RubricResult(rubric_id="correct", met=True, points=5, agreement=agreement)
            score = Score(
                run_id="voted",
                rollout_id=f"s{step}-r{i}",
                step=step,
                status=JudgeStatus.OK,
                reward=1.0,
                rubric_version=1,
                results=[result],
                votes=3,
            )
            await count_health(redis, keys, score, "g")
    report = json.loads(cli("status", "--json").stdout)
    assert report["votes"] == [
        {"run_id": "voted", "step": 1, "rubrics": [{"rubric_id": "correct", "voted": 3, "split": 2}]}
    ]
    line = next(ln for ln in cli("status").stdout.splitlines() if ln.startswith("voted ") and "of" in ln)
    assert line.split() == ["voted", "1", "correct", "2", "of", "3", "0.67"]
