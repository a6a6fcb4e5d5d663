"""TRL's GRPOTrainer for real, on CPU with a tiny model built here (no download), rewarded by rubricd through the
TRL adapter (tests/frameworks/train_grpo.py): one process, then two ranks under torchrun, each evaluating as it trains;
and with a tool the model calls (tests/frameworks/train_grpo_tools.py), its completions sent as trajectories.
The venv with torch and TRL is `make frameworks`'s (cached outside the repo); the test builds it if it is missing."""

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest
import redis as redis_sync

from rubricd import wire
from rubricd.messages import Event, EventKind, RewardedArmRollout, ScoredRollout, StepClosed, StepSummary, Turn
from tests import forks
from tests.threads import one_thread

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
STEPS = [0, 1, 2]  # max_steps=3; TRL's global_step is 0, 1, 2 while it trains, 3 at the final evaluation
PER_RANK = 4  # per_device_train_batch_size: one prompt's 4 generations a step on each rank


def entries(client: redis_sync.Redis, stream: str, type_: type) -> list:
    return [wire.decode(wire.payload(f), type_) for _, f in client.xrange(stream)]


@pytest.mark.timeout(1800)
def test_grpo_trains_through_the_adapter_with_every_rank_counted_and_evaluation_kept_apart(
    stack, keys, start_service, tmp_path, frameworks_python
) -> None:
    python = frameworks_python
    services = [start_service(name, wait=False) for name in ("scorer", "analyzer", "summarizer", "updater")]
    for service in services:
        service.wait_consuming(stack.redis_url, keys)
    env = {
        "RUBRICD_REDIS_URL": stack.redis_url,
        "RUBRICD_NAMESPACE": keys.namespace,
        "PYTHONPATH": str(ROOT / "shared"),
    }
    client = redis_sync.Redis.from_url(stack.redis_url)
    for ranks in (1, 2):
        run, out = f"grpo-{ranks}", tmp_path / f"ranks-{ranks}"
        out.mkdir()
        launch = [python] if ranks == 1 else [python, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
        done = subprocess.run(
            [*launch, str(ROOT / "tests" / "frameworks" / "train_grpo.py"), run, str(out)],
            env={"PATH": "/usr/bin:/bin", **one_thread(), "HOME": str(tmp_path), **env},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-4000:]

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            summaries = [s for s in entries(client, keys.summaries, StepSummary) if s.run_id == run]
            if len(summaries) >= len(STEPS):
                break
            time.sleep(1)
        kept = [s.rollout for s in entries(client, keys.kept_rollouts(run), ScoredRollout)]
        training = Counter(r.step for r in kept if not r.evaluation)
        evaluation = Counter(r.step for r in kept if r.evaluation)
        # Every rank's rollouts of a step are counted in it; TRL's evaluations (every 2 steps, at the end, and
        # trainer.evaluate()) are evaluation rollouts, never counted in a step: the final one's step 3 has none.
        assert training == {s: PER_RANK * ranks for s in STEPS}, training
        assert set(evaluation) == {2, 3} and sum(evaluation.values()) > 0, evaluation
        # Steps are summarized as their analyses come in, not in step order (under load step 1 can finish first).
        summaries.sort(key=lambda s: s.step)
        assert [(s.step, s.analyses, s.expected_rollouts, s.missing_rollouts, s.missing_parts) for s in summaries] == [
            (s, PER_RANK * ranks, PER_RANK * ranks, [], 0) for s in STEPS
        ]
        summarized = [e for e in entries(client, keys.events, Event) if e.run_id == run]
        summarized = [e for e in summarized if e.kind == EventKind.STEP_SUMMARIZED]
        assert [e.fields.get("parts") for e in summarized] == [None if ranks == 1 else 2] * len(STEPS)
        for rank in range(ranks):  # what TRL logged of the rewards rubricd gave, training and evaluation
            logged = json.loads((out / f"rank-{rank}.json").read_text())
            assert any("rewards/rubricd/mean" in entry for entry in logged["log"])
            assert "eval_rewards/rubricd/mean" in logged["eval"]
            assert logged["eval"]["eval_rubricd/judge_failed"] == 0.0
        # Each step's figures as TRL logged them (its log_metric, averaged over the ranks): each rubric's met
        # rate over the step's rollouts of every rank, the rubric version, no judge failed.
        scored = [s for s in entries(client, keys.kept_rollouts(run), ScoredRollout) if not s.rollout.evaluation]
        trained = [e for e in json.loads((out / "rank-0.json").read_text())["log"] if "loss" in e]
        assert [e["step"] for e in trained] == [s + 1 for s in STEPS]
        for entry in trained:
            step = [s.score for s in scored if s.rollout.step == entry["step"] - 1]
            rates = {
                f"rubricd/rubric/{r}": sum(r in {m.rubric_id for m in s.results if m.met} for s in step) / len(step)
                for r in {m.rubric_id for s in step for m in s.results}
            }
            assert rates and {k: v for k, v in entry.items() if k.startswith("rubricd/rubric/")} == pytest.approx(rates)
            version = max(s.rubric_version for s in step)  # the updater may have moved on since step 0
            assert (entry["rubricd/judge_failed"], entry["rubricd/rubric_version"]) == (0.0, version), entry
    client.close()


@pytest.mark.timeout(1200)
def test_grpo_with_a_tool_sends_each_completion_as_the_trajectory_trl_built_with_the_trainers_tools(
    stack, keys, start_service, tmp_path, frameworks_python
) -> None:
    start_service("scorer")
    done = subprocess.run(
        [frameworks_python, str(ROOT / "tests" / "frameworks" / "train_grpo_tools.py"), "grpo-tools", str(tmp_path)],
        env={
            "PATH": "/usr/bin:/bin",
            **one_thread(),
            "HOME": str(tmp_path),
            "RUBRICD_REDIS_URL": stack.redis_url,
            "RUBRICD_NAMESPACE": keys.namespace,
            "PYTHONPATH": str(ROOT / "shared"),
        },
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    handed = json.loads((tmp_path / "completions.json").read_text())
    # TRL's tool loop ran: the model called the tool, TRL ran it and the model answered after its result.
    called = {"type": "function", "function": {"name": "add", "arguments": {"a": 17, "b": 25}}}
    assert (
        handed["completions"]
        == [
            [
                {"role": "assistant", "tool_calls": [called], "content": ""},
                {"role": "tool", "name": "add", "content": "42"},
                {"role": "assistant", "content": "The answer is 42 ."},
            ]
        ]
        * 4
    )  # 2 steps of 2 generations
    assert all(entry.get("tools/call_frequency") == 1.0 for entry in handed["log"] if "loss" in entry)
    # TRL awaited async_trl_reward on its own loop, where the RubricdClient scored it (each run's rollouts name
    # their client's reply stream) and finished it (a reward awaited on another loop than its first raises);
    # training started no thread but tqdm's progress-bar monitor.
    assert handed["on_trls_loop"] and set(handed["started"]) <= {"tqdm_monitor"}
    assert all("rewards/rubricd_async/mean" in entry for entry in handed["log"] if "loss" in entry)
    client = redis_sync.Redis.from_url(stack.redis_url)
    kept = [s.rollout for s in entries(client, keys.kept_rollouts("grpo-tools"), ScoredRollout)]
    on_trls_loop = [s.rollout for s in entries(client, keys.kept_rollouts("grpo-tools-async"), ScoredRollout)]
    closed = [c for c in entries(client, keys.steps, StepClosed) if c.run_id == "grpo-tools-async"]
    client.close()
    assert len(kept) == 4
    assert [r.trajectory for r in on_trls_loop] == [r.trajectory for r in kept]  # the same completions, both ways
    assert {r.reply_to for r in kept} == {handed["replies"]["sync"]}
    assert {r.reply_to for r in on_trls_loop} == {handed["replies"]["async"]} != {handed["replies"]["sync"]}
    assert sorted((c.step, c.rollouts) for c in closed) == [(0, 2), (1, 2)]  # finish() closed the last step
    for rollout, completion in zip(kept, handed["completions"]):
        assert rollout.trajectory[0] == Turn(role="user", content="What is 17 + 25 ?") and rollout.prompt_turns == 1
        assert rollout.trajectory[1:] == msgspec.convert(completion, list[Turn])  # each message, call and result
        assert rollout.policy_turns == [1, 3]
        # The trainer's tools, as its chat template rendered them (transformers' get_json_schema of `add`).
        [tool] = msgspec.to_builtins(rollout.tools)
        assert tool["function"]["name"] == "add" and tool["function"]["description"] == "Add two integers."
        assert tool["function"]["parameters"]["properties"]["a"] == {
            "type": "integer",
            "description": "The first integer.",
        }


@pytest.mark.timeout(1200)
def test_grpo_trains_rubric_arms_judge_then_its_generator_through_the_arm_adapter(
    stack, keys, start_service, service_env, tmp_path, frameworks_python
) -> None:
    pairs = tmp_path / "preferences.jsonl"
    pairs.write_text(
        "".join(
            json.dumps({"prompt": f"Name planet number {i}.", "chosen": "Mars.", "rejected": "It is Mars. " * 12})
            + "\n"
            for i in range(4)
        )
    )
    for args in (
        ["import", "trl-arm", str(pairs)],
        ["phases", "trl-arm", "--first", "judge", "--steps", "1"],
        ["dataset", "trl-arm", "--phase", "generator", "-o", str(tmp_path / "generator.jsonl")],
        ["dataset", "trl-arm", "--phase", "judge", "--generator", "gen-v0", "-o", str(tmp_path / "judge.jsonl")],
    ):
        done = forks.run("arm", *args, env=service_env, timeout=120)
        assert done.returncode == 0, done.stderr
    start_service("arm")
    env = {
        "RUBRICD_REDIS_URL": stack.redis_url,
        "RUBRICD_NAMESPACE": keys.namespace,
        "PYTHONPATH": str(ROOT / "shared"),
    }
    script = ROOT / "tests" / "frameworks" / "train_arm.py"
    done = subprocess.run(
        [frameworks_python, str(script), "trl-arm", str(tmp_path / "generator.jsonl"), str(tmp_path / "judge.jsonl")]
        + ["gen-v0", str(tmp_path)],
        env={"PATH": "/usr/bin:/bin", **one_thread(), "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    turns = json.loads((tmp_path / "turns.json").read_text())
    assert [(t["phase"], t["first_step"]) for t in turns] == [("judge", 0), ("generator", 1)]
    for turn in turns:  # TRL logged the rewards the arm service gave
        assert any(f"rewards/rubricd_arm_{turn['phase']}/mean" in entry for entry in turn["log"]), turn["log"]
    client = redis_sync.Redis.from_url(stack.redis_url)
    kept = entries(client, keys.kept_arm_rollouts("trl-arm"), RewardedArmRollout)
    assert {(k.rollout.phase, k.rollout.step) for k in kept} == {("judge", 0), ("generator", 1)}
    assert len(kept) == 8  # 4 generations a step
    judged = [k.reward for k in kept if k.reward.phase == "judge"]
    assert all(r.reward in (-1.0, 0.0, 1.0) for r in judged)
    drafted = [k.reward for k in kept if k.reward.phase == "generator"]
    assert all((r.penalty is not None) == (r.reward == -1.0) == (r.rubrics == []) for r in drafted)
    assert client.xlen(keys.dead_letters) == 0  # no rollout of the phase a step does not train
    client.close()
