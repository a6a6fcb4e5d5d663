"""verifiers for real (0.4.0, `make agents`'s venv): its own environment runtime samples a scripted policy and
scores every trace with rubricd's reward, a `@vf.reward` method of the task (tests/frameworks/
vf_rubricd_env.py, run by tests/frameworks/verifiers_env.py), each example's group judged whole by a scorer on
the real stack."""

import json

import pytest

from rubricd import wire
from rubricd.messages import JudgeStatus, ScoredRollout
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rubric_set

pytestmark = pytest.mark.integration

RUN = "vf-run"
GROUP = 3
ROWS = [
    {"prompt": "What is 17 + 25?", "answer": "42", "responses": ["The sum is 42.", "The sum is 41.", "It is 42."]},
    # Every judge call on this example's group fails (the simulator's marker).
    {"prompt": "What is 3 + 4? [sim:fail=500,times=99]", "answer": "7", "responses": ["7.", "It is 7.", "8."]},
]


@pytest.mark.timeout(900)
async def test_verifiers_env_scores_its_traces_through_rubricd_and_a_failed_judge_is_a_task_error(
    redis, keys, start_service, tmp_path, agents_python, run_framework
):
    assert await RubricStore(redis, keys).publish(rubric_set(run_id=RUN))
    start_service("scorer", llm__max_retries=1, judge_cache_ttl_s=0)
    run_framework(
        agents_python,
        "verifiers_env.py",
        tmp_path / "out.json",
        run=RUN,
        input=json.dumps(ROWS),
        GROUP_SIZE=str(GROUP),
        NO_PROXY="127.0.0.1,localhost",
    )
    out = json.loads((tmp_path / "out.json").read_text())
    assert "rubricd-client" not in out["threads"]  # scored on verifiers' own loop: no second loop's thread
    traces = out["traces"]
    kept = [wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.kept_rollouts(RUN))]
    assert len(traces) == len(kept) == GROUP * len(ROWS)
    judged = [t for t in traces if t["prompt"] == ROWS[0]["prompt"]]
    failed = [t for t in traces if t["prompt"] == ROWS[1]["prompt"]]
    ok = sorted(k.score.reward for k in kept if k.score.status is JudgeStatus.OK)
    # The judged example's traces carry rubricd's reward, its rubric version and each rubric's verdict.
    assert all(t["ok"] and t["error"] is None for t in judged), judged
    assert sorted(t["reward"] for t in judged) == sorted(t["rewards"]["rubricd"] for t in judged) == ok
    rubric_ids = {r.id for r in rubric_set(run_id=RUN).rubrics}
    for t in judged:
        assert t["metrics"]["rubric_version"] == 1.0
        assert {k.removeprefix("rubric/") for k in t["metrics"] if k.startswith("rubric/")} == rubric_ids
    # Each meta-class's score too, as verifiers recorded it (the seed's `correct` is of class accuracy).
    meta = sorted(k.score.meta_class_scores["accuracy"] for k in kept if k.score.status is JudgeStatus.OK)
    assert sorted(t["metrics"]["meta/accuracy"] for t in judged) == meta and len(meta) == GROUP
    # Each rollout is the trace's conversation with the tool it was offered, judged with its example's group.
    for k in kept:
        assert [t.role for t in k.rollout.trajectory] == ["user", "assistant"] and k.rollout.prompt_turns == 1
        assert [t.function.name for t in k.rollout.tools] == ["calc"]
        assert k.rollout.group_size == GROUP and k.rollout.reference in ("42", "7")
    assert {k.score.grouping.members for k in kept if k.score.grouping} == {GROUP}
    # A failed judge is verifiers' task error on the trace, which a trainer leaves out: not ok, no rubricd reward
    # (verifiers' own `reward`, the sum of the rewards a trace has, reads 0.0 then).
    assert all(not t["ok"] and "judge_failed" in (t["error"] or "") for t in failed), failed
    assert all(t["rewards"]["rubricd"] is None and t["reward"] == 0.0 for t in failed), failed
