"""OpenPipe ART for real (openpipe-art 0.5.18, `make agents`'s venv): its `gather_trajectory_groups` gathers a
scripted policy's trajectory groups and rewards each through rubricd.adapters.art in place of RULER
(tests/frameworks/art_groups.py), against a scorer on the real stack judging each group whole."""

import json

import pytest

from rubricd import wire
from rubricd.messages import JudgeStatus, ScoredRollout
from rubricd_services.state import usage
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rubric_set

pytestmark = pytest.mark.integration

RUN = "art-run"
SCENARIOS = [
    {"question": "What is 17 + 25?", "answers": ["The sum is 42.", "The sum is 41.", "It is 42."]},
    {"question": "What is 3 + 4?", "answers": ["The sum is 7.", "The sum is 8."]},
    # Every judge call of this group fails (the simulator's marker), and nothing else's.
    {"question": "What is 5 + 5? [sim:fail=500,times=99]", "answers": ["The sum is 10.", "It is 11."]},
]


@pytest.mark.timeout(900)
async def test_art_gathers_groups_rewarded_by_rubricd_with_verdicts_and_drops_a_group_it_could_not_judge(
    redis, keys, start_service, tmp_path, agents_python, run_framework
):
    assert await RubricStore(redis, keys).publish(rubric_set(run_id=RUN))
    start_service("scorer", llm__max_retries=1, judge_cache_ttl_s=0)
    run_framework(agents_python, "art_groups.py", tmp_path / "out.json", run=RUN, input=json.dumps(SCENARIOS))
    out = json.loads((tmp_path / "out.json").read_text())
    kept = [wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.kept_rollouts(RUN))]
    scored = {k.rollout.trajectory[-1].content: k for k in kept if k.score.status is JudgeStatus.OK}

    # ART kept the two groups rubricd judged, each whole, and dropped the one whose judge failed (swallowed).
    assert sorted(len(g) for g in out["groups"]) == [2, 3]
    rubric_ids = {r.id for r in rubric_set(run_id=RUN).rubrics}
    for trajectory in (t for g in out["groups"] for t in g):
        score = scored[trajectory["answer"]].score
        assert trajectory["reward"] == score.reward == trajectory["metrics"]["rubricd_reward"]
        assert trajectory["metrics"]["independent_reward"] == 0.5  # the environment's own, kept as RULER keeps it
        assert trajectory["metrics"]["rubric_version"] == score.rubric_version == 1
        verdicts = {k.removeprefix("rubric/"): v for k, v in trajectory["metrics"].items() if k.startswith("rubric/")}
        assert verdicts == {r.rubric_id: (1.0 if r.met else 0.0) for r in score.results}
        assert set(verdicts) == rubric_ids
        assert any(line.startswith("rubricd: ") for line in trajectory["logs"])
    # Each rollout carried the conversation as ART recorded it (its choices as assistant turns) with its tool, and
    # was judged with its group.
    sizes = {s["question"]: len(s["answers"]) for s in SCENARIOS} | {"What is 6 + 6?": 2}  # and UNTOUCHED's
    for k in scored.values():
        roles = [t.role for t in k.rollout.trajectory]
        assert roles == ["system", "user", "assistant", "tool", "assistant"] and k.rollout.prompt_turns == 2
        assert [t.function.name for t in k.rollout.tools] == ["calc"]
        size = sizes[k.rollout.trajectory[1].content]
        assert k.rollout.group_size == size and k.score.grouping and k.score.grouping.members == size
    # ART's own log of the kept groups: each rubric's met rate and the rubric version, over their trajectories.
    [row] = out["history"]
    trajectories = [t for g in out["groups"] for t in g]
    for rubric_id in rubric_ids:
        met = sum(t["metrics"][f"rubric/{rubric_id}"] for t in trajectories) / len(trajectories)
        assert row[f"train/rubric/{rubric_id}"] == pytest.approx(met), row
    assert row["train/rubric_version"] == 1.0
    failed = [k for k in kept if k.score.status is JudgeStatus.JUDGE_FAILED]
    assert {k.rollout.trajectory[1].content for k in failed} == {SCENARIOS[2]["question"]}
    # Without swallowing, the failure is ART's exception, never a reward of 0.
    assert out["raised"] is not None and "judge_failed" in out["raised"] and "2 of 2" in out["raised"]
    assert out["untouched"]  # the group given is left as it was; the one returned carries the rewards
    assert "rubricd-client" not in out["threads"]  # scored on ART's own loop: no second loop's thread


@pytest.mark.timeout(600)
async def test_the_same_group_judged_by_ruler_and_by_rubricd(
    redis, keys, stack, start_service, tmp_path, agents_python, run_framework
):
    """What docs/integrators/art.md shows: RULER's calls and prompt tokens for one group, against rubricd's, group
    judged and judged alone, every call to the same simulator (its token counts: four characters a token)."""
    single = RUN + "-single"
    for run_id in (RUN, single):
        assert await RubricStore(redis, keys).publish(rubric_set(run_id=run_id))
    start_service("scorer", llm__max_retries=1, judge_cache_ttl_s=0)
    [scenario] = SCENARIOS[:1]
    run_framework(
        agents_python, "art_vs_ruler.py", stack.llm_base_url, tmp_path / "vs.json", run=RUN, input=json.dumps(scenario)
    )
    out = json.loads((tmp_path / "vs.json").read_text())
    n = len(scenario["answers"])
    [ruler] = out["ruler"]["calls"]  # RULER: one call for the group
    judged = {r: next(u for u in await usage.read(redis, keys, r) if u.agent == "judge") for r in (RUN, single)}
    assert (judged[RUN].calls, judged[single].calls) == (1, n)  # rubricd: one call a group, or one a rollout
    for run_id in (RUN, single):  # each trajectory with its reward and each rubric's verdict
        assert all(
            "rubricd_reward" in t["metrics"] and any(k.startswith("rubric/") for k in t["metrics"])
            for t in out["rubricd"][run_id]
        )
        assert len(out["rubricd"][run_id]) == n
    # What the page says of them: RULER's prompt is the shortest, judging alone the longest; the simulator does not
    # judge RULER's prompt (its schema's smallest instance has no scores), so RULER, swallowing, returned nothing.
    assert ruler["prompt_tokens"] < judged[RUN].prompt_tokens < judged[single].prompt_tokens
    assert out["ruler"]["returned"] is None
    print(
        f"\nprompt tokens a rollout (group of {n}): RULER {ruler['prompt_tokens'] / n:.0f}, rubricd group-judged"
        f" {judged[RUN].prompt_tokens / n:.0f}, judged alone {judged[single].prompt_tokens / n:.0f};"
        f" RULER returned {out['ruler']['returned']}"
    )
