"""NeMo Gym for real (0.4.0, `make nemo-gym`'s Python 3.13 root): its own rollout collection and SimpleAgents
collect a scripted policy's rollouts, text and tool-using, each row repeated, with the gateway as (or behind) the
resources server's verifier, and a scorer on the real stack judging each task's group whole
(tests/frameworks/nemo_gym_collect.py)."""

import json

import pytest

from rubricd import wire
from rubricd.messages import JudgeStatus, ScoredRollout

from .conftest import RUN

pytestmark = pytest.mark.integration

REPEATS = 2
CHOICES = {"rubricd_run": RUN, "rubricd_step": 1, "rubricd_group_size": REPEATS, "rubricd_judge_mode": "group"}
CALC = {
    "type": "function",
    "name": "calc",
    "description": "Multiplies two whole numbers: 'a*b'.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    "strict": True,
}
ROWS = [
    {
        "agent_ref": {"name": "text_agent"},
        "responses_create_params": {"input": "What is 2 + 2?"},
        "expected_answer": "4",
    },
    {
        "agent_ref": {"name": "tool_agent"},
        "responses_create_params": {"input": "What is 17 * 3? Use the calculator.", "tools": [CALC]},
        "expected_answer": "51",
    },
    # Every judge call on this task's group fails (the simulator's marker).
    {
        "agent_ref": {"name": "text_agent"},
        "responses_create_params": {"input": "What is 3 + 4? [sim:fail=500,times=99]"},
        "expected_answer": "7",
    },
]


@pytest.mark.timeout(900)
async def test_nemo_gym_s_own_collection_keeps_rubricd_s_rewards_and_files_its_failures(
    run_rubrics, start_scorer, start_gateway, redis, keys, tmp_path, nemo_gym_python, run_framework
):
    start_scorer()
    url = start_gateway(failed_reward=-1.0)
    rows = "".join(json.dumps({**row, **CHOICES}) + "\n" for row in ROWS)
    run_framework(nemo_gym_python, "nemo_gym_collect.py", url, tmp_path, run=RUN, input=rows, NUM_REPEATS=str(REPEATS))
    out = json.loads((tmp_path / "collected.json").read_text())
    kept = [wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.kept_rollouts(RUN))]
    assert len(kept) == REPEATS * len(ROWS)
    # NeMo Gym kept the judged rollouts, each with rubricd's reward; its task is the rollout's group, judged whole.
    assert sorted((r["_ng_task_index"], r["_ng_rollout_index"]) for r in out["kept"]) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert sorted(r["reward"] for r in out["kept"]) == sorted(
        k.score.reward for k in kept if k.score.status is JudgeStatus.OK
    )
    assert sorted(r["reward"] for r in out["kept"] if r["_ng_task_index"] == 0) == [0.0, 1.0]  # "It is 5.", "It is 4."
    assert all(r["judge_ok"] == 1.0 and not r["mask_sample"] and "_ng_failure_class" not in r for r in out["kept"])
    groups = {(k.rollout.group, k.rollout.group_size, k.score.grouping.members) for k in kept if k.score.grouping}
    assert groups == {("task-0", REPEATS, REPEATS), ("task-1", REPEATS, REPEATS)}
    # The tool-using episode is judged whole: the call, the calculator's answer, the answer after it.
    [tool_episode, *_] = [k for k in kept if k.rollout.reference == "51"]
    assert [t.role for t in tool_episode.rollout.trajectory] == ["user", "assistant", "tool", "assistant"]
    assert [t.function.name for t in tool_episode.rollout.tools] == ["calc"]
    assert tool_episode.score.reward == 1.0 and "51" in str(tool_episode.rollout.trajectory[2].content)
    # A failed judge is NeMo Gym's failed rollout: in its failures file, not trained on, its class and reason said.
    assert sorted(r["_ng_task_index"] for r in out["failed"]) == [2, 2]
    for r in out["failed"]:
        assert r["_ng_failure_class"] == "judge_failed" and r["mask_sample"]
        assert r["_ng_failure_judge_error"] == r["rubricd_error"] and "500" in r["rubricd_error"]
        assert (r["reward"], r["no_reward"], r["judge_ok"]) == (-1.0, 1.0, 0.0)
    # NeMo Gym's aggregate metrics: the gateway's for its agent's tasks, NeMo Gym's own default for the calculator.
    text = out["metrics"]["text_agent"]
    assert text["key_metrics"]["mean/judge_ok"] == 0.5 and text["key_metrics"]["mean/no_reward"] == 0.5
    assert {g["_ng_task_index"]: g["num_rollouts"] for g in text["group_level_metrics"]} == {0: REPEATS, 2: REPEATS}
    assert out["metrics"]["tool_agent"]["agent_metrics"]["mean/reward"] == 1.0
    # The gateway's aggregate is NeMo Gym's default: the same results described by both, every statistic alike,
    # and each task's the same entry (but NeMo Gym's `sample`, a row it makes up here); only the key metrics differ.
    ours, theirs = out["described"]["gateway"], out["described"]["nemo_gym"]
    assert statistics(ours["agent_metrics"]) == pytest.approx(statistics(theirs["agent_metrics"]))
    assert ours["agent_metrics"].keys() == theirs["agent_metrics"].keys()
    assert [g["_ng_task_index"] for g in ours["group_level_metrics"]] == [0, 2]
    for a, b in zip(ours["group_level_metrics"], theirs["group_level_metrics"], strict=True):
        assert statistics(a) == pytest.approx(statistics(b))
        assert {k: v for k, v in a.items() if k not in statistics(a)} == {
            k: v for k, v in b.items() if k not in statistics(b) and k != "sample"
        }
    assert statistics(ours["agent_metrics"])["std/reward"] > 0  # described over the rollouts, not one value


def statistics(metrics: dict[str, object]) -> dict[str, object]:
    """NeMo Gym's default statistics in an AggregateMetrics dict (`mean/reward`, `std/total_tokens`, ...)."""
    return {k: v for k, v in metrics.items() if k.split("/")[0] in ("mean", "max", "min", "median", "std")}
