"""verl's reward loop for real (verl 0.9.1's RewardLoopManager, two Ray workers, its naive reward manager),
scoring a batch through the docs' verl reward function file (docs/integrators/verl.md) with a scorer on the real stack
(tests/frameworks/verl_reward_loop.py, in `make frameworks`'s venv): each sample's reward lands in verl's
`rm_scores`, and every sample carries the same extra keys whatever its status (verl takes them from the first
sample: a failed judge among judged ones once failed the step). And verl's tool agent loop, its conversation sent
as the rollout's trajectory (tests/frameworks/verl_agent_loop.py). And both at two workers over three steps (the
reward loop's, the agent loop manager's): every step summarized once, whole."""

import json

import msgspec
import pytest

from rubricd import wire
from rubricd.messages import Event, EventKind, JudgeStatus, Rubric, ScoredRollout, StepSummary, Turn
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rubric_set

pytestmark = pytest.mark.integration

RUN = "verl-run"
CASES = [
    {"prompt": "What is 17 + 25 ?", "response": "The sum is 42 .", "label": "42", "step": 4},
    # The judge's every call on this prompt fails (the simulator's marker), and nothing else's.
    {
        "prompt": "What is 3 + 4 ? [sim:fail=500,times=99,agent=JudgeVerdict]",
        "response": "It is 7 .",
        "label": "7",
        "step": 4,
    },
    {"prompt": "What is 17 + 25 ?", "response": "The sum is 41 .", "label": "42", "step": 4},
]


@pytest.mark.timeout(900)
async def test_verl_s_reward_loop_scores_a_batch_through_the_adapter(
    redis, keys, start_service, tmp_path, frameworks_python, run_framework
):
    assert await RubricStore(redis, keys).publish(rubric_set(run_id=RUN))
    start_service("scorer", llm__max_retries=1, judge_cache_ttl_s=0)
    functions = ["compute_score", "compute_score_async"]
    out = run_framework(
        frameworks_python,
        "verl_reward_loop.py",
        tmp_path,
        *functions,
        run=RUN,
        input=json.dumps(CASES),
        RAY_USAGE_STATS_ENABLED="0",
    )
    results = {r["function"]: r for r in map(json.loads, out.splitlines())}
    assert set(results) == set(functions)
    for name, result in results.items():
        assert result["rewards"] == [1.0, 0.0, 0.0], name  # the failed judge's is the failure value, flagged
        extra = result["extra"]
        assert set(extra) == {"score", "judge_ok", "masked", "rubric_version", "weighted_total", "rubric/correct"}
        assert extra["judge_ok"] == [1.0, 0.0, 1.0] and extra["rubric_version"] == [1.0, 1.0, 1.0], name
        assert extra["rubric/correct"] == [1.0, 0.0, 0.0], name  # met; its judge failed; not met
        # verl's validation logs it as val-aux/<data source>/rubric/correct/mean@1: the share met
        assert result["validation"]["rubric/correct"]["mean@1"] == pytest.approx(1 / 3), name
    # Each sample reached the run at its step with verl's prompt and ground truth. verl pads a batch to a multiple
    # of its reward workers with copies of its first samples and scores them too: 3 samples, 2 workers, 4 scored
    # a function (verl gives no ids, so each call's rollouts are new ones).
    kept = [wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.kept_rollouts(RUN))]
    assert len(kept) == 2 * 4
    assert {(r.rollout.step, r.rollout.prompt, r.rollout.reference) for r in kept} == {
        (c["step"], c["prompt"], c["label"]) for c in CASES
    }
    assert [r.score.status for r in kept].count(JudgeStatus.JUDGE_FAILED) == 2
    assert [r.rollout.response for r in kept].count(CASES[0]["response"]) == 2 * 2  # the padding


@pytest.mark.timeout(900)
async def test_verl_s_two_reward_workers_each_close_their_share_and_every_step_is_summarized_whole(
    redis, keys, start_service, tmp_path, frameworks_python, run_framework, eventually
):
    """Three steps of 8 samples through verl's reward loop at reward.num_workers=2: each Ray worker loads the docs'
    reward file, so two VerlRewards that know neither their rank nor their count each close their own 4 rollouts
    of a step. Every step is summarized once from all 8 analyses, expecting 8; the last one too, which the
    workers close at exit or, where Ray ends them without atexit, the summarizer after its latest analysis."""
    run = "verl-steps"
    assert await RubricStore(redis, keys).publish(rubric_set(run_id=run))
    for service in ("scorer", "analyzer"):
        start_service(service)
    start_service("summarizer", unclosed_step_s=5, step_quiet_s=30)  # a worker may start its next step late here
    cases = [
        {"prompt": f"What is {a} + {i} ?", "response": f"The sum is {a + i} .", "label": str(a + i), "step": step}
        for step, a in enumerate((17, 23, 31))
        for i in range(8)
    ]
    out = run_framework(
        frameworks_python,
        "verl_reward_loop.py",
        tmp_path,
        "compute_score",
        run=run,
        input=json.dumps(cases),
        RAY_USAGE_STATS_ENABLED="0",
    )
    assert [(r["step"], len(r["rewards"])) for r in map(json.loads, out.splitlines())] == [(0, 8), (1, 8), (2, 8)]

    async def summarized() -> list[StepSummary]:
        found = [wire.decode(wire.payload(f), StepSummary) for _, f in await redis.xrange(keys.summaries)]
        return sorted((s for s in found if s.run_id == run), key=lambda s: s.step) if len(found) >= 3 else []

    summaries = await eventually(summarized, "the three steps' summaries", timeout=300)
    assert [(s.step, s.analyses, s.missing_rollouts) for s in summaries] == [(0, 8, []), (1, 8, []), (2, 8, [])]
    assert [s.expected_rollouts for s in summaries][:2] == [8, 8]  # not 4: one worker's closure does not shrink it
    assert summaries[2].expected_rollouts in (8, None)  # closed by both workers, or by no closure at all
    events = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    once = [e.step for e in events if e.kind == EventKind.STEP_SUMMARIZED and e.run_id == run]
    assert sorted(once) == [0, 1, 2]
    assert [e.fields.get("closers") for e in events if e.kind == EventKind.STEP_SUMMARIZED and e.step < 2] == [2, 2]


@pytest.mark.timeout(900)
async def test_verl_s_two_agent_loop_workers_each_close_their_share_and_every_step_is_summarized_whole(
    redis, keys, start_service, tmp_path, frameworks_python, run_framework, eventually
):
    """Three steps of 6 samples through verl's AgentLoopManager at agent.num_workers=2
    (tests/frameworks/verl_agent_workers.py): each AgentLoopWorker loads the docs' agent loop file, so two VerlRewards
    that know neither their rank nor their count score and close their own 3 rollouts of a step in the loop. Every
    step is summarized once from all 6 analyses, expecting 6; the last one too (Ray ends the workers without
    atexit: the summarizer closes it after its latest analysis)."""
    run = "verl-agent-steps"
    assert await RubricStore(redis, keys).publish(rubric_set(run_id=run))
    for service in ("scorer", "analyzer"):
        start_service(service)
    start_service("summarizer", unclosed_step_s=5, step_quiet_s=30)  # a worker may start its next step late here
    out = run_framework(
        frameworks_python, "verl_agent_workers.py", tmp_path, 3, 6, run=run, RAY_USAGE_STATS_ENABLED="0"
    )
    results = [json.loads(line) for line in out.splitlines()]
    assert [(r["step"], len(r["rewards"])) for r in results] == [(0, 6), (1, 6), (2, 6)]
    kept = [wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.kept_rollouts(run))]
    assert sorted(r.rollout.step for r in kept) == [0] * 6 + [1] * 6 + [2] * 6
    assert all(r.rollout.trajectory and r.score.status is JudgeStatus.OK for r in kept)
    for r in results:  # each sample's reward is the one rubricd kept for it (rm_scores: float32)
        assert sorted(r["rewards"]) == pytest.approx(
            sorted(k.score.reward for k in kept if k.rollout.step == r["step"])
        )

    async def summarized() -> list[StepSummary]:
        found = [wire.decode(wire.payload(f), StepSummary) for _, f in await redis.xrange(keys.summaries)]
        found = sorted((s for s in found if s.run_id == run), key=lambda s: s.step)
        return found if len(found) >= 3 else []

    summaries = await eventually(summarized, "the three steps' summaries", timeout=300)
    assert [(s.step, s.analyses, s.missing_rollouts) for s in summaries] == [(0, 6, []), (1, 6, []), (2, 6, [])]
    assert [s.expected_rollouts for s in summaries][:2] == [6, 6]  # not 3: one worker's closure does not shrink it
    assert summaries[2].expected_rollouts in (6, None)  # closed by both workers, or by no closure at all
    events = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    summarized_steps = [e for e in events if e.kind == EventKind.STEP_SUMMARIZED and e.run_id == run]
    assert sorted(e.step for e in summarized_steps) == [0, 1, 2]
    assert [e.fields.get("closers") for e in summarized_steps if e.step < 2] == [2, 2]


@pytest.mark.timeout(900)
async def test_verls_tool_agent_loop_sends_its_conversation_and_takes_the_reward_and_turn_scores(
    redis, keys, start_service, tmp_path, frameworks_python, run_framework
):
    """verl's ToolAgentLoop for real (tests/frameworks/verl_agent_loop.py: a scripted policy calls a function tool,
    then answers), through the docs' agent loop file: the reward function reads the conversation verl hands it,
    and the loop that scores itself gets verl's reward and per-turn rewards."""
    args = Rubric(id="args", criterion="Each tool call passes arguments the tool accepts", points=2, scope="turn")
    assert await RubricStore(redis, keys).publish(rubric_set("correct", args, run_id="verl-agent"))
    start_service("scorer", llm__max_retries=1)
    out = run_framework(
        frameworks_python, "verl_agent_loop.py", tmp_path, run="verl-agent", RAY_USAGE_STATS_ENABLED="0"
    )
    result = json.loads(out.splitlines()[-1])
    # The conversation verl's loop kept: its hermes parser's call (arguments an object, no id), the tool's answer.
    calls = [m.get("tool_calls") for m in result["messages"]]
    assert [m["role"] for m in result["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert calls[1] == [{"type": "function", "function": {"name": "add", "arguments": {"a": 17, "b": 25}}}]
    assert result["messages"][2]["content"] == "42"
    kept = [
        wire.decode(wire.payload(f), ScoredRollout) for _, f in await redis.xrange(keys.kept_rollouts("verl-agent"))
    ]
    assert len(kept) == 2  # one through verl's reward loop, one scored in the loop
    for rollout in (k.rollout for k in kept):
        assert rollout.trajectory == msgspec.convert(result["messages"], list[Turn])
        assert (rollout.prompt_turns, rollout.policy_turns, rollout.step) == (1, [1, 3], 2)
        assert [t.function.name for t in rollout.tools] == ["add"]
    through_reward_loop, in_loop = kept  # in the order they were scored
    assert result["reward_loop"]["rewards"] == [pytest.approx(through_reward_loop.score.reward)]  # rm_scores: float32
    assert result["reward_loop"]["extra"]["judge_ok"] == [1.0]
    agent = result["agent_loop"]
    assert agent["reward_score"] == in_loop.score.reward == agent["reward_extra_info"]["score"]
    assert agent["turn_scores"] == [t.points for t in in_loop.score.turns]
    assert [t.turn for t in in_loop.score.turns] == [1, 3] and agent["turn_scores"][0] == 2.0  # the call's turn
