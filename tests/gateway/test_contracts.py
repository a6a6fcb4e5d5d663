"""Each contract's request to samples and outcomes to answer, without a broker."""

import os
import subprocess
import sys

from rubricd.messages import JudgeStatus, Score
from rubricd_services.gateway import contracts
from rubricd_services.gateway.gateway import Call, rollout_ids


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


def test_nemo_gym_prompt_and_response_from_the_responses_api():
    request = contracts.NemoGymRequest(
        responses_create_params={
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "2+2?"}]}],
        },
        response={
            "output": [
                {"type": "reasoning", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4"}]},
            ]
        },
        expected_answer="4",
    )
    sample = contracts.nemo_gym_sample(request)
    assert (sample.prompt, sample.response, sample.reference) == ("system: Be brief.\n\nuser: 2+2?", "4", "4")


def test_rollout_ids_are_derived_from_the_key_or_the_sample():
    samples = [contracts.Sample("p", "r", "4"), contracts.Sample("p", "r", "4")]
    keyed = Call(run_id="r", step=1, deadline_s=1, key="req 1/x")
    unkeyed = Call(run_id="r", step=1, deadline_s=1)
    assert rollout_ids(keyed, samples) == rollout_ids(keyed, samples)
    assert len(set(rollout_ids(unkeyed, samples))) == 2  # the index tells equal samples apart
    assert rollout_ids(unkeyed, samples) != rollout_ids(Call(run_id="r", step=2, deadline_s=1), samples)
    assert all(i.startswith("k-") and " " not in i for i in rollout_ids(keyed, samples))


def test_a_bad_setting_stops_the_gateway_at_start_naming_it():
    env = {**os.environ, "RUBRICD_DEADLINE_S": "500", "RUBRICD_MAX_DEADLINE_S": "100"}
    done = subprocess.run(
        [sys.executable, "-m", "rubricd_services.cli", "serve", "gateway"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "deadline_s (500.0) is above max_deadline_s (100.0)" in done.stderr, done.stderr
