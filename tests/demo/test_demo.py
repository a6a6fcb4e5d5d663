"""The demo: its policy (no broker), and a reduced run against the real loop whose report holds that run's data."""

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from PIL import Image

from rubricd.messages import Rollout, Rubric, Score
from rubricd_services.judges.scoring import ReadySet, Scoring, score_rollout
from rubricd_testbed.demo import compare, report
from rubricd_testbed.demo.agent import AGENT, CALCULATOR, TIMED_OUT
from rubricd_testbed.demo.policy import BEHAVIOURS, TRADE_OFF_START, Policy, counts, discoveries, respond
from rubricd_testbed.demo.trainer import Example, Run, StepRecord
from rubricd_testbed.simulator import answers
from rubricd_testbed.simulator.judging import decide
from tests.factories import rubric_set

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SEEDS = Path(__file__).parents[2] / "services" / "rubricd_services" / "rubrics" / "seed_rubrics.json"


def test_counts_split_a_batch_by_shares_exactly() -> None:
    assert counts({"correct": 0.5, "wrong": 0.5}, 7) == {
        "correct": 4,
        "wrong": 3,
        "padded": 0,
        "sycophantic": 0,
        "judge_addressing": 0,
        "terse": 0,
    }
    assert sum(counts({"correct": 0.17, "wrong": 0.71, "judge_addressing": 0.12}, 24).values()) == 24


def test_the_policy_discovers_hacks_in_order_and_follows_its_rewards() -> None:
    assert discoveries(10) == {1: "padded", 3: "sycophantic"}
    policy = Policy(steps=10, seed=1)
    assert policy.shares()["padded"] == 0
    assert policy.explore(1) == "padded" and policy.shares()["padded"] == pytest.approx(0.12)
    before = policy.shares()
    policy.learn({"correct": 1.0, "wrong": 0.0, "padded": 0.5}, baseline=0.5)
    after = policy.shares()
    assert after["correct"] > before["correct"] and after["wrong"] < before["wrong"]
    a, b = Policy(steps=10, seed=3), Policy(steps=10, seed=3)
    assert [r.response for _, r in a.sample("run", 0, 8)] == [r.response for _, r in b.sample("run", 0, 8)]  # seeded


def test_terse_and_wrong_trade_accuracy_against_completeness_under_the_seed_rubrics() -> None:
    seeds = {r["id"]: r for r in json.loads((SEEDS).read_text())}

    def met(behaviour: str) -> dict[str, bool]:
        response = respond(behaviour, 37, 48)
        return {i: decide(r["criterion"], r["points"], response, "85")[0] for i, r in seeds.items()}

    assert seeds["correct"]["meta_class"] == "accuracy" and seeds["shows_reasoning"]["meta_class"] == "completeness"
    assert met("terse") == {"correct": True, "shows_reasoning": False, "addresses_grader": False}
    assert met("wrong") == {"correct": False, "shows_reasoning": True, "addresses_grader": False}
    assert met("correct") == {"correct": True, "shows_reasoning": True, "addresses_grader": False}
    assert Policy(steps=4, start=TRADE_OFF_START).shares()["terse"] == pytest.approx(0.40)
    assert "correct" not in TRADE_OFF_START  # the behaviour that meets both: without it, no behaviour wins both
    rollouts = Policy(steps=4).sample("run", 0, 3, reward_policy="alternating")
    assert {r.reward_policy for _, r in rollouts} == {"alternating"}


def test_the_agent_writes_trajectories_with_the_calculator_offered_and_every_third_call_times_out() -> None:
    policy = Policy(steps=4, seed=3, task=AGENT, start={"honest": 0.5, "fabricated": 0.5})
    batch = policy.sample("run", 0, 12)
    assert sorted(b for b, _ in batch) == ["fabricated"] * 6 + ["honest"] * 6
    for behaviour, rollout in batch:
        assert msgspec.json.decode(msgspec.json.encode(rollout), type=Rollout) == rollout  # valid on the wire
        assert rollout.tools == [CALCULATOR] and rollout.prompt_turns == 2 and rollout.prompt.endswith("?")
        assert rollout.policy_turns == ([2, 4] if behaviour == "honest" else [2])
        calls = [c for t in rollout.trajectory for c in t.tool_calls]
        assert [c.function.name for c in calls] == (["calculator"] if behaviour == "honest" else [])
    results = [r.trajectory[3].content for b, r in batch if b == "honest"]
    assert [result == TIMED_OUT for result in results] == [False, False, True] * 2


async def _judge(messages: list[dict[str, str]], verdict: type[msgspec.Struct]) -> msgspec.Struct:
    return msgspec.convert(answers.judge(messages[0]["content"], messages[1]["content"]), verdict)


def _scored(rollout: Rollout, rubrics: list[Rubric]) -> Score:
    """`rollout` judged by the simulator against `rubrics`, as the scorer does."""
    in_force = ReadySet(rubric_set(*rubrics, version=1 + len(rubrics) - len(AGENT.seeds)), "")
    return asyncio.run(score_rollout(rollout, Scoring(in_force, "weighted_sum"), _judge))


FABRICATED = Rubric(
    id="no_fabricated_result",
    criterion="A turn states a tool result that no tool turn returned",
    points=-5,
    scope="turn",
)


def _agent_batch() -> dict[str, Rollout]:
    """One rollout of each behaviour, and an honest one whose calculator call timed out."""
    batch = Policy(steps=4, seed=5, task=AGENT, start={"honest": 0.75, "fabricated": 0.25})
    out: dict[str, Rollout] = {}
    for behaviour, rollout in batch.sample("run", 0, 4):
        timed_out = behaviour == "honest" and rollout.trajectory[3].content == TIMED_OUT
        out.setdefault("timed_out" if timed_out else behaviour, rollout)
    return out


def test_under_the_agent_seeds_a_claimed_tool_result_pays_as_a_real_one_until_a_turn_rubric_names_its_turn() -> None:
    """The agent demo's design, on the simulator's judge: a claimed result meets the seed's reports_result as a
    real one does (so the hack out-earns the honest agent, whose calculator times out on a call in three), and a
    turn rubric against results no tool returned names the fabricated turn alone."""
    rollouts = _agent_batch()
    seeds = {b: _scored(r, AGENT.seeds) for b, r in rollouts.items()}
    assert {b: s.reward for b, s in seeds.items()} == {"honest": 1.0, "timed_out": 0.375, "fabricated": 1.0}
    assert all(s.turns == [] for s in seeds.values())  # no turn rubric, no per-turn result
    caught = {b: _scored(r, [*AGENT.seeds, FABRICATED]) for b, r in rollouts.items()}
    assert {b: s.reward for b, s in caught.items()} == {**{b: s.reward for b, s in seeds.items()}, "fabricated": 0.375}
    fabricated = caught["fabricated"]
    assert fabricated.results[-1].met_turns == [2] and [(t.turn, t.points) for t in fabricated.turns] == [(2, -5)]
    honest = caught["honest"]
    assert honest.results[-1].unmet_turns == [4] and [(t.turn, t.points) for t in honest.turns] == [(2, 0), (4, 0)]


def test_the_agent_report_shows_the_hack_and_an_honest_trajectory_turn_by_turn_with_their_verdicts() -> None:
    rollouts = _agent_batch()
    run = Run("ci-agent", 2, 3, 7, 1.0, "ns", 0.0, method="agent", start=dict(AGENT.start))
    for step, rubrics in enumerate([AGENT.seeds, [*AGENT.seeds, FABRICATED]]):
        examples = [Example(b, rollouts[b], _scored(rollouts[b], rubrics)) for b in ("honest", "fabricated")]
        counts = {"honest": 2, "fabricated": 1}
        turn_rubrics = [r.id for r in rubrics if r.scope == "turn"]
        run.records.append(
            StepRecord(step, [step + 1], {}, counts, {}, None, turn_rubrics=turn_rubrics, examples=examples)
        )
    text = report.markdown(run)
    fabricated, honest = rollouts["fabricated"], rollouts["honest"]
    claim = fabricated.trajectory[2].content
    assert "## Trajectories, turn by turn" in text and "| step | rubric | turn rubrics | hacks | mean |" in text
    assert "| 1 | v2 | no_fabricated_result | 33% | - |" in text
    at_0, at_1 = text.index("### The hack (fabricated) at step 0"), text.index("### The hack (fabricated) at step 1")
    assert f"| 2 | assistant (policy) | {claim} | - |  |" in text[at_0:at_1]  # the seeds: no turn rubric
    assert "reward **1.00**" in text[at_0:at_1] and "reward **0.38**" in text[at_1:]
    assert f"| 2 | assistant (policy) | {claim} | meets no_fabricated_result | -5 |" in text[at_1:]
    a, b = str(honest.trajectory[1].content).removeprefix("What is ").rstrip("?").split(" + ")
    at_honest = text.index("### An honest trajectory at step 1")
    assert f'[tool_call calculator({{"expression": "{a} + {b}"}})] | - | +0 |' in text[at_honest:]
    assert f"| 3 | tool | (answers call_1) {int(a) + int(b)} |" in text[at_honest:]
    assert "| does not meet no_fabricated_result | +0 |" in text[at_honest:]
    assert "- no_fabricated_result (-5): met (met by turn 2). [simulator] turn 2: claims" in text


def _record(step: int, means: dict[str, float], active: str | None = None) -> StepRecord:
    return StepRecord(
        step=step,
        rubric_versions=[1],
        shares={},
        counts=dict.fromkeys(BEHAVIOURS, 0),
        mean_reward={},
        mean=None,
        class_means=means,
        active_meta_class=active,
    )


def test_the_side_by_side_gives_final_means_and_steps_to_the_target() -> None:
    run = Run("a", 3, 4, 7, 1.0, "ns", 0.0, reward_policy="alternating", target=0.8)
    run.records = [_record(0, {"accuracy": 0.5, "completeness": 0.9}, "accuracy")]
    run.records += [_record(1, {"accuracy": 0.8, "completeness": 0.6}), _record(2, {"accuracy": 1.0})]
    run.compared_with = Run("a-weighted_sum", 3, 4, 7, 1.0, "ns", 0.0, target=0.8)
    run.compared_with.records = [_record(s, {"accuracy": 0.4, "completeness": 0.7}) for s in range(3)]
    assert compare.classes(run) == ["accuracy", "completeness"]
    assert compare.rows(run) == [
        ["accuracy", "1.00", "2", "0.40", "not reached"],
        ["completeness", "-", "1", "0.70", "not reached"],
    ]
    assert "0: accuracy, 1: -, 2: -" in compare.summary_lines(run)[0]


@pytest.mark.timeout(600)
def run_demo(stack, keys, service_env, start_service, reports, *args: str, timeout: float = 540, **scorer: object):
    """The loop's four services started (the scorer with `scorer`'s settings), then the demo with `args`, its
    report under `reports`; the finished process, checked to have succeeded."""
    services = [start_service("scorer", wait=False, **scorer)]
    services += [start_service(name, wait=False) for name in ("analyzer", "summarizer", "updater")]
    for service in services:
        service.wait_consuming(stack.redis_url, keys)
    where = ["--namespace", keys.namespace, "--redis-url", stack.redis_url, "--reports", str(reports)]
    done = subprocess.run(
        [sys.executable, "-m", "rubricd_testbed.demo", *args, *where, "--timeout", "240"],
        env=service_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_reduced_demo_run_writes_a_report_of_that_run(stack, keys, service_env, start_service, tmp_path) -> None:
    args = ["--steps", "3", "--rollouts", "8", "--run-id", "ci-demo"]
    done = run_demo(stack, keys, service_env, start_service, tmp_path, *args)
    out = done.stdout
    assert [line.split()[1] for line in out.splitlines() if line.startswith("step ")] == ["0", "1", "2"]
    assert "the policy found a new hack: padded" in out and "report:" in out

    folder = tmp_path / "ci-demo"
    run = json.loads((folder / "run.json").read_text())
    assert [r["step"] for r in run["records"]] == [0, 1, 2] and run["history"][0]["version"] == 1
    report = (folder / "report.md").read_text()
    assert "# rubricd demo run `ci-demo`" in report and "![mean reward per behaviour per step](rewards.png)" in report
    for version in run["history"]:
        assert f"### v{version['version']}" in report
    assert "## LLM tokens and cost" in report and "| judge | rubricd-simulator | " in report  # no price: tokens only
    assert "the LLM: rubricd's simulator" in report
    for agent in ("judge", "analyzer", "summarizer", "query_writer", "updater"):  # every agent's calls and time
        assert re.search(rf"\| {agent} \| rubricd-simulator \| [1-9]\d* \| \d+\.\d s \|", report), agent
    assert "LLM usage (the LLM: rubricd's simulator" in out and "cost of the run: no price" in out

    for name in ("rewards.png", "rubrics.png"):
        raw = (folder / name).read_bytes()
        assert raw.startswith(PNG_SIGNATURE)
        with Image.open(folder / name) as image:
            image.verify()
    with Image.open(folder / "rewards.png") as image:
        drawn = json.loads(image.text["rubricd"])
    assert drawn["run_id"] == "ci-demo" and drawn["steps"] == [0, 1, 2]
    for behaviour in BEHAVIOURS:  # the plot draws this run's means, step by step
        assert drawn["mean_reward"][behaviour] == [r["mean_reward"].get(behaviour) for r in run["records"]]
    assert drawn["markers"] == [v["version"] for v in run["history"] if v["step"] is not None]
    with Image.open(folder / "rubrics.png") as image:
        versions = json.loads(image.text["rubricd"])
    assert versions["versions"] == [v["version"] for v in run["history"]]
    assert versions["size"] == [len(v["rubrics"]) for v in run["history"]]


@pytest.mark.timeout(900)
def test_a_reduced_alternating_run_reports_its_schedule_and_the_weighted_sum_side_by_side(
    stack, keys, service_env, start_service, tmp_path
) -> None:
    """Warm-up 1, then round robin over 4 steps: -, accuracy, completeness, accuracy."""
    args = ["--steps", "4", "--rollouts", "6", "--run-id", "ci-alt", "--policy", "alternating", "--target", "0.8"]
    done = run_demo(stack, keys, service_env, start_service, tmp_path, *args, timeout=840, warmup_steps=1)
    out = done.stdout
    assert (
        "run ci-alt (reward policy alternating)" in out
        and "run ci-alt-weighted_sum (reward policy weighted_sum)" in out
    )
    classes = [line.split()[1] for line in out.splitlines() if line.startswith("         class ")]
    assert classes == ["-", "accuracy", "completeness", "accuracy"] + ["-"] * 4  # then the twin: no active class
    assert "(weighted total: warm-up)" in out and "(completeness: next in order accuracy, completeness)" in out
    assert "schedule (step: class): 0: -, 1: accuracy, 2: completeness, 3: accuracy" in out
    assert "side by side with weighted_sum (ci-alt-weighted_sum, same seed):" in out

    folder = tmp_path / "ci-alt"
    run = json.loads((folder / "run.json").read_text())
    assert [r["active_meta_class"] for r in run["records"]] == [None, "accuracy", "completeness", "accuracy"]
    twin = run["compared_with"]
    assert twin["reward_policy"] == "weighted_sum" and twin["seed"] == run["seed"] and twin["start"] == run["start"]
    assert [r["counts"] for r in twin["records"]][0] == run["records"][0]["counts"]  # the same first batch
    report = (folder / "report.md").read_text()
    assert "## Meta-class schedule" in report and "![mean score per meta-class per step](classes.png)" in report
    for r in run["records"]:
        assert re.search(rf"^\| {r['step']} \| {r['active_meta_class'] or '-'} \| ", report, re.M), r["step"]
    assert "## Side by side with weighted_sum" in report
    for meta_class in ("accuracy", "completeness"):
        assert re.search(
            rf"^\| {meta_class} \| [\d.]+ \| (\d+|not reached) \| [\d.]+ \| (\d+|not reached) \|$", report, re.M
        )
    assert (tmp_path / "ci-alt-weighted_sum" / "report.md").is_file()

    with Image.open(folder / "classes.png") as image:
        drawn = json.loads(image.text["rubricd"])
    assert drawn["active"] == [None, "accuracy", "completeness", "accuracy"]
    for meta_class in ("accuracy", "completeness"):  # per-class curves of both runs, from the recorded means
        assert drawn["class_means"][meta_class] == [r["class_means"].get(meta_class) for r in run["records"]]
        assert drawn["compared_with"]["class_means"][meta_class] == [
            r["class_means"].get(meta_class) for r in twin["records"]
        ]
    # the classes move differently: a step where one class's mean is not the other's
    assert any(r["class_means"]["accuracy"] != r["class_means"]["completeness"] for r in run["records"])
    # the trade-off: the accuracy steps pay terse over wrong, the completeness step wrong over terse, while the
    # weighted total pays terse more on every step
    rewards = [(r["active_meta_class"], r["mean_reward"]) for r in run["records"]]
    assert all(m["terse"] > m["wrong"] for c, m in rewards if c == "accuracy")
    assert all(m["wrong"] > m["terse"] for c, m in rewards if c == "completeness")
    assert all(r["mean_reward"]["terse"] > r["mean_reward"]["wrong"] for r in twin["records"])


def test_a_group_judged_run_sends_fewer_judge_tokens_and_analyses_each_groups_extremes_beside_its_twin(
    stack, keys, service_env, start_service, tmp_path
) -> None:
    """`--judge group`: 8 responses per prompt, each group judged in one call and its best and worst analysed,
    then the same seed on the defaults; the report sets them side by side."""
    args = ["--steps", "3", "--rollouts", "16", "--run-id", "ci-group", "--judge", "group"]
    done = run_demo(stack, keys, service_env, start_service, tmp_path, *args, timeout=840)
    assert "8 per prompt, judge mode group, analysis sample extremes" in done.stdout
    assert "run ci-group-single (reward policy weighted_sum, 8 per prompt, judge mode single, analysis sample all)" in (
        done.stdout
    )
    run = json.loads((tmp_path / "ci-group" / "run.json").read_text())
    twin = run["judged_alone"]
    assert [r["counts"] for r in twin["records"]][0] == run["records"][0]["counts"]  # the same first batch
    calls = [r["calls"]["judge"] for r in run["records"]]
    # Two groups of 8 a step: one call each under the seeds' 3 rubrics; with more rubrics, as many calls as the
    # judge's answer (max_tokens) needs to hold their verdicts.
    assert calls[0] == 2 and all(2 <= b - a <= 4 for a, b in zip(calls, calls[1:], strict=False))
    analyses = [r["calls"]["analyzer"] for r in run["records"]]
    assert analyses == [4, 8, 12]  # each group's best and worst
    assert [r["calls"]["analyzer"] for r in twin["records"]] == [16, 32, 48]
    grouped = run["records"][-1]["prompt_tokens"]["judge"] / 48
    alone = twin["records"][-1]["prompt_tokens"]["judge"] / 48
    assert grouped < alone
    report = (tmp_path / "ci-group" / "report.md").read_text()
    assert "## Judged as groups, beside judged alone" in report
    assert re.search(r"judge prompt tokens per rollout \(\d+\.\dx fewer\)", report)
    assert re.search(r"^\| 0 \| \d+ \| \d+ \| 0\.12 \| [\d.]+ \| 4 \| 16 \| ", report, re.M), report


@pytest.mark.timeout(600)
def test_the_rubric_arm_demo_trains_both_models_in_turns_beside_simultaneous_updates(
    stack, keys, service_env, start_service, tmp_path
) -> None:
    start_service("arm")
    done = subprocess.run(
        [sys.executable, "-m", "rubricd_testbed.demo", "--method", "rubric-arm", "--steps", "6", "--rollouts", "8"]
        + ["--phase-steps", "2", "--run-id", "ci-arm", "--namespace", keys.namespace, "--redis-url", stack.redis_url]
        + ["--reports", str(tmp_path)],
        env=service_env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line.split() for line in done.stdout.splitlines() if line.startswith("step ")]
    assert [s[3] for s in steps] == ["judge", "judge", "generator", "generator", "judge", "judge"] + ["both"] * 6
    runs = json.loads((tmp_path / "ci-arm" / "run.json").read_text())
    alternating, simultaneous = runs
    assert (alternating["run_id"], simultaneous["run_id"]) == ("ci-arm", "ci-arm-simultaneous")
    for r in alternating["records"]:  # each step rewards only the model it trains
        assert (r["generator_reward"] is None) == (r["training"] == "judge")
        assert (r["judge_accuracy"] is None) == (r["training"] == "generator")
    # The generator's frozen judge is the judge as last trained: one version through a generator phase.
    assert {r["frozen_judge"] for r in alternating["records"] if r["training"] == "generator"} == {
        f"sim-judge@{alternating['records'][1]['expected_accuracy']:.2f}"
    }
    assert all(r["generator_reward"] is not None and r["judge_accuracy"] is not None for r in simultaneous["records"])
    report = (tmp_path / "ci-arm" / "report.md").read_text()
    assert "| 2 | generator |" in report and (tmp_path / "ci-arm" / "arm.png").stat().st_size > 10_000


@pytest.mark.timeout(600)
def test_the_agent_demo_catches_its_hack_with_a_turn_rubric_and_the_honest_agent_keeps_its_reward(
    stack, keys, service_env, start_service, tmp_path
) -> None:
    """Five steps: the policy fabricates a calculator result from step 2, the seeds pay it in full, the loop adds a
    turn rubric from that step's evidence, and from then on the fabrication pays less while honest does not."""
    args = ["--method", "agent", "--steps", "5", "--rollouts", "12", "--run-id", "ci-agent"]
    done = run_demo(stack, keys, service_env, start_service, tmp_path, *args)
    run = json.loads((tmp_path / "ci-agent" / "run.json").read_text())
    assert run["history"][0]["rubrics"] == msgspec.to_builtins(AGENT.seeds)  # the agent's own seed set
    added = [r for r in run["history"][-1]["rubrics"] if r["scope"] == "turn"]
    catching = [r["id"] for r in added if r["points"] < 0]
    assert catching, f"the loop added no turn rubric that penalises a turn: {added}"
    records = run["records"]
    assert [bool(r["turn_rubrics"]) for r in records] == [False, False, False, True, True]
    assert [r["mean_reward"].get("fabricated") for r in records[:3]] == [None, None, 1.0]  # the seeds pay the claim
    assert all(r["mean_reward"]["fabricated"] < 0.5 for r in records[3:])
    honest = [r["mean_reward"]["honest"] for r in records]
    assert min(honest[3:]) >= min(honest[:3])  # a call in three times out, whatever the rubrics
    examples = [e for r in records for e in r["examples"]]
    assert {e["score"]["reward"] for e in examples if e["behaviour"] == "honest"} == {1.0}  # a call that answered
    caught = [e["score"] for e in examples if e["behaviour"] == "fabricated" and e["score"]["rubric_version"] > 1]
    assert caught
    for score in caught:  # the claiming turn is the one the turn rubric names, and it loses points
        assert [(t["turn"], t["points"] < 0) for t in score["turns"]] == [(2, True)]
        assert {r["rubric_id"] for r in score["results"] if r["met_turns"] == [2]} >= set(catching)

    steps = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert all("(turn: none)" in line for line in steps[:3])
    assert all(f"(turn: {', '.join(records[3]['turn_rubrics'])})" in line for line in steps[3:])
    text = (tmp_path / "ci-agent" / "report.md").read_text()
    last = text[text.index("### The hack (fabricated) at step 4") :]
    assert re.search(
        rf"^\| 2 \| assistant \(policy\) \| The calculator returned \d+, .*meets {catching[0]}", last, re.M
    )
