"""Each contract's request to samples and outcomes to answer, without a broker."""

import os
import statistics
from types import SimpleNamespace

import msgspec
import pytest
from starlette.requests import Request

from rubricd.client import InvalidRollout, checked
from rubricd.messages import JudgeStatus, Score, TurnResult
from rubricd_services.gateway import contracts
from rubricd_services.gateway.gateway import Call, rollout_ids, rollouts_of
from rubricd_services.gateway.http import BadRequest, read_call
from rubricd_services.gateway.settings import GatewaySettings
from tests import forks


def score(reward: float | None, status: JudgeStatus = JudgeStatus.OK, **fields: object) -> Score:
    return Score(run_id="r", rollout_id="x", step=0, status=status, reward=reward, rubric_version=1, **fields)


def test_openrlhf_response_is_the_query_after_its_prompt():
    request = contracts.OpenRLHFRequest(
        query=["PROMPT answer", "other text"], prompts=["PROMPT ", "P"], labels=[4, None]
    )
    samples = contracts.openrlhf_samples(request)
    assert [(s.prompt, s.response, s.reference) for s in samples] == [
        ("PROMPT ", "answer", "4"),
        ("P", "other text", None),  # a query that does not start with its prompt is the response whole
    ]


def test_a_sample_without_reward_gets_the_failure_value_and_its_flags():
    outcomes = [
        contracts.outcome(score(0.5)),
        contracts.outcome(score(None, JudgeStatus.JUDGE_FAILED, error="judge down")),
        contracts.outcome(score(None, masked=True)),
        contracts.outcome(None),
    ]
    answer = contracts.openrlhf_answer(outcomes, failed_reward=-1.0)
    assert answer["rewards"] == [0.5, -1.0, -1.0, -1.0]
    assert answer["scores"] == [0.5, 0.0, 0.0, 0.0]  # OpenRLHF's scores stay in [0, 1]
    assert answer["extra_logs"]["rubricd/judge_ok"] == [1.0, 0.0, 1.0, 0.0]
    assert answer["extra_logs"]["rubricd/masked"] == [0.0, 0.0, 1.0, 0.0]
    assert answer["extra_logs"]["rubricd/timed_out"] == [0.0, 0.0, 0.0, 1.0]
    classes = ["accuracy", "completeness"]
    keyed = [contracts.slime_reward_dict(o, -1.0, classes) for o in outcomes]
    assert keyed[1]["error"] == "judge down" and len({tuple(k) for k in keyed}) == 1  # one set of keys
    verified = [contracts.nemo_gym_answer({}, o, -1.0, classes) for o in outcomes]
    assert [v["reward_components"] for v in verified] == [{"accuracy": -1.0, "completeness": -1.0}] * 4
    assert [v["undefined_classes"] for v in verified] == [2.0] * 4
    # NeMo Gym's failure keys: the sample masked, its kind (its collection files it as failed) and a judge's reason
    assert [v["mask_sample"] for v in verified] == [False, True, True, True]
    assert [v.get("_ng_failure_class") for v in verified] == [None, "judge_failed", "masked", "timed_out"]
    assert verified[1]["_ng_failure_judge_error"] == "judge down"
    assert "_ng_failure_judge_error" not in verified[2] and "_ng_failure_judge_error" not in verified[3]
    again = contracts.nemo_gym_answer({"_ng_failure_class": "judge_failed", "mask_sample": True}, outcomes[0], -1, [])
    assert not again["mask_sample"] and "_ng_failure_class" not in again  # a rollout verified again: its new answer


def test_nemo_gym_verify_is_scored_as_the_whole_exchange():
    request = contracts.NemoGymRequest(
        responses_create_params={
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "2+2?"}]}],
        },
        response={
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Add them."}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4"}]},
            ]
        },
        expected_answer=4,
    )
    sample = contracts.nemo_gym_sample(request)
    assert (sample.reference, sample.prompt_turns) == ("4", 2)
    [rollout] = rollouts_of(CALL, [sample])
    assert [(t.role, t.text, t.reasoning) for t in rollout.trajectory] == [
        ("system", "Be brief.", None),
        ("user", "2+2?", None),
        ("assistant", "4", "Add them."),
    ]
    assert (rollout.prompt, rollout.response, rollout.policy_turns) == ("system: Be brief.\n\nuser: 2+2?", "4", [2])


CALL = Call(run_id="r", step=1, deadline_s=1)
ASKED = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "2+2?"}]


def slime(**body: object) -> contracts.Sample:
    return contracts.slime_sample(msgspec.convert(body, contracts.SlimeRequest))


def test_a_slime_message_prompt_is_the_prompt_turns_and_the_response_the_turn_after_them():
    [rollout] = rollouts_of(CALL, [slime(prompt=ASKED, response="4", label=4)])
    assert [(t.role, t.text) for t in rollout.trajectory] == [
        ("system", "Answer briefly."),
        ("user", "2+2?"),
        ("assistant", "4"),
    ]
    assert (rollout.prompt_turns, rollout.policy_turns, rollout.response, rollout.reference) == (2, [2], "4", "4")
    [text] = rollouts_of(CALL, [slime(prompt="2+2?", response="4")])  # a text prompt stays text
    assert (text.trajectory, text.prompt, text.response) == ([], "2+2?", "4")


def test_a_slime_request_may_carry_the_raw_wire_trajectory_and_tools():
    turns = [
        *ASKED,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "add", "arguments": "[2, 2]"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "4"},
    ]  # fmt: skip
    tools = [{"function": {"name": "add", "description": "Adds numbers."}}]
    [rollout] = rollouts_of(CALL, [slime(trajectory=turns, tools=tools, prompt_turns=2, label="4")])
    assert (rollout.policy_turns, rollout.tools[0].function.name) == ([2, 4], "add")
    assert "[tool_call add([2, 2])]" in rollout.response


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"prompt": ASKED, "trajectory": ASKED, "response": "4"}, "prompt: messages or a trajectory, not both"),
        ({"prompt": "2+2?", "response": "4", "tools": [{"function": {"name": "add"}}]}, "tools and prompt_turns go"),
        ({"prompt": [*ASKED, {"role": "tool", "tool_call_id": "c9", "content": "4"}], "response": "4"}, "trajectory[2].tool_call_id"),
        ({"trajectory": ASKED, "prompt_turns": 3}, "prompt_turns 3 is beyond"),
    ],
)  # fmt: skip
def test_a_slime_request_malformed_as_messages_is_refused_naming_the_field(body, named):
    with pytest.raises(ValueError) as refused:
        slime(**body)
    assert named in str(refused.value)


def test_a_sample_with_empty_text_is_a_rollout_all_the_same():
    # The wire's text contract: a text rollout carries a prompt and a response, and an empty one is judged.
    [rollout] = rollouts_of(CALL, [slime(prompt="", response="")])
    assert (rollout.prompt, rollout.response, rollout.trajectory) == ("", "", [])


def test_per_turn_results_are_answered_where_the_contract_has_room():
    turns = [TurnResult(turn=2, points=3.0, met=["uses-tool"]), TurnResult(turn=4, points=-5.0, unmet=["uses-tool"])]
    o = contracts.outcome(score(0.5, turns=turns))
    expected = [
        {"turn": 2, "points": 3.0, "met": ["uses-tool"], "unmet": []},
        {"turn": 4, "points": -5.0, "met": [], "unmet": ["uses-tool"]},
    ]
    assert contracts.slime_reward_dict(o, 0.0, [])["turns"] == expected
    verified = contracts.nemo_gym_answer({"turns": "the row's own"}, o, 0.0, [])
    assert (verified["rubricd_turns"], verified["turns"]) == (expected, "the row's own")  # the row's fields kept
    assert contracts.slime_reward_dict(contracts.outcome(None), 0.0, [])["turns"] == []  # the same keys always


def test_rollout_ids_are_derived_from_the_key_or_the_sample():
    samples = [contracts.Sample("p", "r", "4"), contracts.Sample("p", "r", "4")]
    keyed = Call(run_id="r", step=1, deadline_s=1, key="req 1/x")
    unkeyed = Call(run_id="r", step=1, deadline_s=1)
    assert rollout_ids(keyed, samples) == rollout_ids(keyed, samples)
    assert len(set(rollout_ids(unkeyed, samples))) == 2  # the index tells equal samples apart
    assert rollout_ids(unkeyed, samples) != rollout_ids(Call(run_id="r", step=2, deadline_s=1), samples)
    assert all(i.startswith("k-") and " " not in i for i in rollout_ids(keyed, samples))
    # Two trajectories of the same text (here: the same answer, reasoned or not) are two rollouts.
    plain = slime(trajectory=[*ASKED, {"role": "assistant", "content": "4"}], prompt_turns=2, response="4")
    reasoned = slime(
        trajectory=[*ASKED, {"role": "assistant", "content": "4", "reasoning": "2+2"}], prompt_turns=2, response="4"
    )
    assert len(set(rollout_ids(unkeyed, [plain]) + rollout_ids(unkeyed, [reasoned]))) == 2


def test_a_slime_sample_carries_its_group_and_identical_members_stay_two_rollouts():
    # What a --custom-rm-path function posts for slime's Sample: group_index, n_samples_per_prompt, index.
    members = [slime(prompt="2+2?", response="4", label=4, group=12, group_size=2, index=i) for i in (24, 25)]
    rollouts = rollouts_of(CALL, members)
    assert [(r.group, r.group_size) for r in rollouts] == [("12", 2)] * 2
    # One sample per request (slime's index 0 each time): the same answer twice is two members, not one rollout.
    assert len({rollout_ids(CALL, [m])[0] for m in members}) == 2
    assert rollouts_of(CALL, [slime(prompt="p", response="r")])[0].group is None  # slime's own remote_rm: none


def nemo_gym(**cohort: object) -> contracts.Sample:
    body = {"responses_create_params": {"input": "2+2?"}, "response": {"output": []}, **cohort}
    return contracts.nemo_gym_sample(msgspec.convert(body, contracts.NemoGymRequest))


def test_nemo_gym_s_cohort_is_the_group_and_a_replacement_attempt_a_group_of_its_own():
    first = [nemo_gym(_ng_group_id="run7-task3", _ng_rollout_index=i) for i in range(2)]
    again = nemo_gym(_ng_group_id="run7-task3", _ng_group_attempt=1, _ng_rollout_index=0)
    assert [(s.group, s.index) for s in first] == [("run7-task3", 0), ("run7-task3", 1)]
    assert again.group == "run7-task3/attempt-1"
    assert nemo_gym().group is None
    sized = Call(run_id="r", step=1, deadline_s=1, group_size=2, judge_mode="group", judge_votes=3)
    rollouts = rollouts_of(sized, [*first, nemo_gym()])
    assert [(r.group, r.group_size) for r in rollouts] == [("run7-task3", 2)] * 2 + [(None, None)]
    assert {(r.judge_mode, r.judge_votes, r.analysis_sample) for r in rollouts} == {("group", 3, None)}
    assert len(set(rollout_ids(CALL, first[:1]) + rollout_ids(CALL, first[1:]))) == 2  # same answer, two members


def test_nemo_gym_s_task_is_the_group_where_no_cohort_is_named():
    members = [nemo_gym(_ng_task_index=3, _ng_rollout_index=i) for i in range(2)]
    assert [(s.group, s.index) for s in members] == [("task-3", 0), ("task-3", 1)]
    assert nemo_gym(_ng_task_index=3, _ng_group_id="g7").group == "g7"  # a named cohort wins


def test_nemo_gym_s_aggregate_metrics_describe_every_number_overall_and_per_task():
    def verified(task: int | None, reward: float, judge_ok: bool, repeat: int = 0) -> dict[str, object]:
        usage = {"input_tokens": 10, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 0}}
        row = {"_ng_rollout_index": repeat, "reward": reward, "judge_ok": judge_ok, "rubricd_error": None}
        return row | {"response": {"usage": usage}, "rubricd_turns": [], "big": 10**400, "_ng_task_index": task}

    rows = [verified(1, -1.0, False), verified(0, 1.0, True), verified(0, 0.5, True, repeat=1)]
    got = contracts.nemo_gym_aggregate_metrics(contracts.NemoGymAggregateRequest(rows))
    overall = got["agent_metrics"]
    assert overall["mean/reward"] == pytest.approx(0.5 / 3) and overall["median/reward"] == 0.5
    assert (overall["max/reward"], overall["min/reward"]) == (1.0, -1.0)
    assert overall["std/reward"] == pytest.approx(statistics.stdev([1.0, 0.5, -1.0]))
    assert overall["mean/judge_ok"] == pytest.approx(2 / 3) and overall["mean/input_tokens"] == 10  # a bool is 0/1
    assert sorted({k.split("/", 1)[1] for k in overall}) == ["input_tokens", "judge_ok", "output_tokens", "reward"]
    assert got["key_metrics"] == {"mean/reward": overall["mean/reward"], "mean/judge_ok": overall["mean/judge_ok"]}
    [task0, task1] = got["group_level_metrics"]  # by task
    assert (task0["_ng_task_index"], task0["num_rollouts"], task0["mean/reward"]) == (0, 2, 0.75)
    assert (task1["_ng_task_index"], task1["num_rollouts"], task1["std/reward"]) == (1, 1, 0.0)  # one: std 0
    assert [(i["rollout_id"], i["reward"], i["judge_ok"]) for i in task0["rollout_infos"]] == [
        ("0:0", 1.0, 1.0),
        ("0:1", 0.5, 1.0),
    ]
    assert (task0["expected_num_rollouts"], task0["missing_num_rollouts"]) == (2, 0)  # all of a task's are sent
    # As pandas describes them for NeMo Gym: a column with one value among two rollouts has no std (a rubric
    # version on a scored rollout beside a timed-out one); an index may come as a bool or a whole float.
    scored, timed_out = {"reward": 1.0, "rubric_version": 3}, {"reward": 0.0, "rubric_version": None}
    got = contracts.nemo_gym_aggregate_metrics(
        contracts.NemoGymAggregateRequest([scored | {"_ng_task_index": 1.0}, timed_out | {"_ng_task_index": True}])
    )
    [task] = got["group_level_metrics"]
    assert (task["_ng_task_index"], task["std/reward"], task["mean/rubric_version"]) == (1, statistics.stdev([1, 0]), 3)
    assert "std/rubric_version" not in task
    # Without its task a rollout is in task 0, without its repeat numbered in its task; no `response`, no usage.
    bare = {"reward": 1.0, "response": None}
    got = contracts.nemo_gym_aggregate_metrics(contracts.NemoGymAggregateRequest([bare, bare]))
    assert [i["rollout_id"] for g in got["group_level_metrics"] for i in g["rollout_infos"]] == ["0:0", "0:1"]
    # Figures beyond a float's range are left out, never a failed request.
    huge = contracts.nemo_gym_aggregate_metrics(contracts.NemoGymAggregateRequest([{"x": 1e308}, {"x": 1e308}]))
    assert "mean/x" not in huge["agent_metrics"] and huge["agent_metrics"]["max/x"] == 1e308
    assert contracts.nemo_gym_aggregate_metrics(contracts.NemoGymAggregateRequest([]))["agent_metrics"] == {}


def request(query: str = "", headers: dict[str, str] | None = None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "POST", "path": "/", "query_string": query.encode(), "headers": raw})


def test_the_run_s_choices_come_from_headers_query_or_body_fields():
    gateway = SimpleNamespace(settings=GatewaySettings())
    by_query = read_call(request("judge_mode=group&judge_votes=3&analysis_sample=2&group_size=8"), {}, gateway)
    assert (by_query.judge_mode, by_query.judge_votes, by_query.analysis_sample, by_query.group_size) == (
        "group",
        3,
        2,
        8,
    )
    by_header = read_call(request(headers={"X-Rubricd-Analysis-Sample": "extremes"}), {}, gateway)
    assert (by_header.analysis_sample, by_header.judge_mode) == ("extremes", None)
    by_row = read_call(request(), {"rubricd_judge_mode": "single", "rubricd_group_size": 4}, gateway)
    assert (by_row.judge_mode, by_row.group_size) == ("single", 4)
    with pytest.raises(BadRequest, match="choices"):
        read_call(request("judge_votes=three"), {}, gateway)
    # Out of bounds is refused with the rollout, naming the field, before anything is published.
    with pytest.raises(InvalidRollout, match="judge_votes"):
        checked(rollouts_of(read_call(request("judge_votes=12"), {}, gateway), [slime(prompt="p", response="r")])[0])


def test_a_bad_setting_stops_the_gateway_at_start_naming_it():
    env = {**os.environ, "RUBRICD_DEADLINE_S": "500", "RUBRICD_MAX_DEADLINE_S": "100"}
    done = forks.run("serve", "gateway", env=env, timeout=60)
    assert done.returncode != 0 and "deadline_s (500.0) is above max_deadline_s (100.0)" in done.stderr, done.stderr
