"""The gateway against the real stack: each framework's request as the framework sends it, a scorer judging
with the simulator (a response is correct iff it holds the reference)."""

import asyncio
import json
import time

import httpx
import pytest

from rubricd import wire
from rubricd.messages import Rollout, ScoredRollout
from rubricd_services.state.arm import prompt_key
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rubric_set

from .conftest import RUN

pytestmark = pytest.mark.integration

QUESTION = "What is 17 + 25?"
RIGHT, WRONG = "The sum is 42.", "The sum is 41."
FAILED = "The sum is 42. [sim:fail=500]"  # the judge's every attempt fails
HANGS = "The sum is 42. [sim:fail=timeout]"  # the judge holds until its caller gives up
# OpenRLHF's prompt is the chat-templated text; its query is that prompt, the response, and the end token.
TEMPLATED = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"


async def judge_calls(stack) -> int:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"{stack.llm_base_url.removesuffix('/v1')}/admin/stats")
        return int(r.json()["requests"])


async def test_openrlhf_get_reward(run_rubrics, start_scorer, start_gateway):
    start_scorer()
    url = start_gateway()
    body = {  # what OpenRLHF's remote reward client posts
        "query": [TEMPLATED + r + "<|im_end|>" for r in (RIGHT, WRONG, FAILED)],
        "prompts": [TEMPLATED] * 3,
        "labels": ["42", "42", "42"],
    }
    async with httpx.AsyncClient(timeout=60) as http:
        r = await http.post(f"{url}/get_reward?run={run_rubrics}&step=3", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["rewards"] == [1.0, 0.0, 0.0]
    assert answer["scores"] == [1.0, 0.0, 0.0]
    logs = answer["extra_logs"]
    assert logs["rubricd/judge_ok"] == [1.0, 1.0, 0.0]  # the third 0.0 is the failure value, flagged
    assert logs["rubricd/no_reward"] == [0.0, 0.0, 1.0]
    assert logs["rubricd/timed_out"] == [0.0, 0.0, 0.0]


CLASSES = '["accuracy", "completeness"]'  # the deployment's meta-classes: the run's rubric is of accuracy only


async def test_slime_reward_and_reward_dict(run_rubrics, start_scorer, start_gateway):
    start_scorer()
    url = start_gateway(meta_classes=CLASSES)
    headers = {"X-Rubricd-Run": run_rubrics, "X-Rubricd-Step": "1"}
    async with httpx.AsyncClient(timeout=60, headers=headers) as http:
        right = await http.post(f"{url}/slime/reward", json={"prompt": QUESTION, "response": RIGHT, "label": "42"})
        wrong = await http.post(f"{url}/slime/reward", json={"prompt": QUESTION, "response": WRONG, "label": "42"})
        chat = [{"role": "user", "content": QUESTION}]  # slime's prompt after apply_chat_template=False
        keyed = await http.post(f"{url}/slime/reward_dict", json={"prompt": chat, "response": RIGHT, "label": "42"})
        failed = await http.post(
            f"{url}/slime/reward_dict", json={"prompt": QUESTION, "response": FAILED, "label": "42"}
        )
    assert (right.json(), wrong.json()) == (1.0, 0.0)
    assert keyed.json() | {"rubric_version": None} == {
        "reward": 1.0,
        "judge_ok": 1.0,
        "masked": 0.0,
        "timed_out": 0.0,
        "no_reward": 0.0,
        "rubric_version": None,
        "meta/accuracy": 1.0,
        "meta/completeness": 0.0,  # no rubric of the class: the failure value, counted as undefined
        "undefined_classes": 1.0,
        "error": None,
        "turns": [],  # no turn rubric in the set
    }
    flagged = failed.json()
    assert (flagged["reward"], flagged["judge_ok"], flagged["no_reward"]) == (0.0, 0.0, 1.0)
    assert flagged["error"] and set(flagged) == set(keyed.json())  # the same keys for every sample


def nemo_gym_verify_request(text: str) -> dict:
    """A verify request as NeMo Gym's simple agent sends it: the Responses API params and response, and the row's
    own fields (expected_answer, and here the rubricd run)."""
    return {
        "responses_create_params": {"input": [{"role": "user", "content": QUESTION}], "temperature": 1.0},
        "response": {
            "id": "resp_1",
            "created_at": 1760000000.0,
            "model": "policy",
            "object": "response",
            "output": [
                {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
        "expected_answer": "42",
        "rubricd_run": RUN,
        "rubricd_step": 2,
    }


async def test_nemo_gym_verify(run_rubrics, start_scorer, start_gateway):
    start_scorer()
    url = start_gateway(meta_classes=CLASSES)
    async with httpx.AsyncClient(timeout=60) as http:
        seeded = await http.post(f"{url}/seed_session", json={})
        right = (await http.post(f"{url}/verify", json=nemo_gym_verify_request(RIGHT))).json()
        wrong = (await http.post(f"{url}/verify", json=nemo_gym_verify_request(WRONG))).json()
        failed = (await http.post(f"{url}/verify", json=nemo_gym_verify_request(FAILED))).json()
    assert seeded.status_code == 200
    # Every declared class in every response (NeMo Gym wants the same objectives for every task): a class without a
    # score has the failure value, counted in undefined_classes.
    assert (right["reward"], right["reward_components"], right["judge_ok"]) == (
        1.0,
        {"accuracy": 1.0, "completeness": 0.0},
        1.0,
    )
    assert right["undefined_classes"] == 1.0
    assert right["expected_answer"] == "42" and right["response"]["id"] == "resp_1"  # the request, echoed
    assert (wrong["reward"], wrong["reward_components"]) == (0.0, {"accuracy": 0.0, "completeness": 0.0})
    assert (failed["reward"], failed["judge_ok"], failed["no_reward"], failed["reward_components"]) == (
        0.0,
        0.0,
        1.0,
        {"accuracy": 0.0, "completeness": 0.0},
    )
    assert failed["undefined_classes"] == 2.0
    assert failed["rubricd_error"]
    # NeMo Gym's own failure keys: its rollout collection keeps the sample out of training (its failures file).
    assert failed["_ng_failure_class"] == "judge_failed"
    assert failed["_ng_failure_judge_error"] == failed["rubricd_error"]
    assert "_ng_failure_class" not in right and "_ng_failure_class" not in wrong


def nemo_gym_tool_request() -> dict:
    """A verify request of a tool-using episode, built as NeMo Gym's simple agent builds it: the model's outputs
    (reasoning, a function call, then a message) and the tool's output between them, in `response.output`."""
    body = nemo_gym_verify_request(RIGHT)
    add = {"type": "function", "name": "add", "description": "Adds two integers.", "parameters": {"type": "object"}}
    body["responses_create_params"]["tools"] = [add]
    body["response"]["output"] = [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Use the tool."}]},
        {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 17, "b": 25}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        *body["response"]["output"],
    ]
    return body


async def test_nemo_gym_verify_judges_the_whole_trajectory_and_refuses_one_malformed_naming_the_item(
    redis, keys, run_rubrics, start_scorer, start_gateway, eventually
):
    start_scorer()
    url = start_gateway()
    malformed = nemo_gym_tool_request()
    malformed["response"]["output"][2]["call_id"] = "call_9"
    async with httpx.AsyncClient(timeout=60) as http:
        verified = await http.post(f"{url}/verify", json=nemo_gym_tool_request(), headers={"Idempotency-Key": "tools"})
        refused = await http.post(f"{url}/verify", json=malformed)
    assert verified.status_code == 200 and verified.json()["reward"] == 1.0, verified.text
    assert refused.status_code == 422
    assert refused.json()["error"] == "response.output[2].call_id: 'call_9' answers no earlier call"

    async def scored() -> Rollout | None:  # the rollout as the scorer judged it, from the analyzers' stream
        for _, fields in await redis.xrange(keys.scored):
            entry = wire.decode(wire.payload(fields), ScoredRollout)
            if entry.rollout.rollout_id == "k-tools.0":
                return entry.rollout
        return None

    rollout = await eventually(scored, "the scored rollout")
    assert [(t.role, t.text, t.reasoning) for t in rollout.trajectory] == [
        ("user", QUESTION, None),
        ("assistant", "", "Use the tool."),
        ("tool", "42", None),
        ("assistant", RIGHT, None),
    ]
    assert rollout.trajectory[1].tool_calls[0].function.arguments == '{"a": 17, "b": 25}'
    assert (rollout.prompt_turns, rollout.policy_turns, rollout.tools[0].function.name) == (1, [1, 3], "add")


async def test_per_turn_results_come_back_where_the_contract_has_room(redis, keys, start_scorer, start_gateway):
    run = "gw-turns"
    assert await RubricStore(redis, keys).publish(rubric_set("correct", "uses", "fabricates", run_id=run))
    start_scorer()
    url = start_gateway()
    honest = nemo_gym_tool_request() | {"rubricd_run": run}
    invented = {  # the raw wire's trajectory in slime's body: an answer claiming a tool result, no tool called
        "trajectory": [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "The calculator returned 42, so the sum is 42."},
        ],
        "prompt_turns": 1,
        "label": "42",
    }
    async with httpx.AsyncClient(timeout=60) as http:
        verified = (await http.post(f"{url}/verify", json=honest)).json()
        keyed = (await http.post(f"{url}/slime/reward_dict?run={run}", json=invented)).json()
    # One result per policy turn: the call (turn 1) meets no turn rubric, the answer (turn 3) uses its result.
    assert [(t["turn"], t["met"], t["points"] > 0) for t in verified["rubricd_turns"]] == [
        (1, [], False),
        (3, ["uses"], True),
    ]
    assert [(t["turn"], t["met"], t["points"] < 0) for t in keyed["turns"]] == [(1, ["fabricates"], True)]


async def test_a_retried_request_gets_the_first_scores_without_a_second_judging(
    stack, run_rubrics, start_scorer, start_gateway
):
    start_scorer()
    url = start_gateway()
    sample = {"prompt": QUESTION, "response": RIGHT, "label": "42"}
    async with httpx.AsyncClient(timeout=60, headers={"X-Rubricd-Run": run_rubrics}) as http:
        keyed = {"Idempotency-Key": "req-7"}
        before = await judge_calls(stack)
        first = (await http.post(f"{url}/slime/reward_dict", json=sample, headers=keyed)).json()
        judged = await judge_calls(stack)
        again = (await http.post(f"{url}/slime/reward_dict", json=sample, headers=keyed)).json()
        assert await judge_calls(stack) == judged  # the retry judged nothing
        # Without a key, the same sample of the same run and step is the same rollout too (a hash of it).
        unkeyed = (await http.post(f"{url}/slime/reward_dict", json=sample)).json()
        judged = await judge_calls(stack)
        repeated = (await http.post(f"{url}/slime/reward_dict", json=sample)).json()
        assert await judge_calls(stack) == judged
    assert judged == before + 2  # one judging per distinct rollout: the keyed one, the unkeyed one
    assert again == first and repeated == unkeyed and first["reward"] == 1.0


async def test_beyond_the_bound_answers_429_and_a_deadline_answers_in_time(
    redis, keys, run_rubrics, start_scorer, start_gateway, eventually
):
    start_scorer()
    url = start_gateway(max_rollouts_in_flight=2, retry_after_s=3)
    hanging = {"query": [HANGS, HANGS + " "], "prompts": ["", ""], "labels": ["42", "42"]}
    async with httpx.AsyncClient(timeout=60, headers={"X-Rubricd-Run": run_rubrics}) as http:
        started = time.monotonic()
        slow = asyncio.create_task(http.post(f"{url}/get_reward", json=hanging, headers={"X-Rubricd-Deadline": "4"}))

        async def holding_both() -> bool:  # the gateway publishes a request's rollouts once it counts them in flight
            return await redis.xlen(keys.rollouts) >= 2

        await eventually(holding_both, "the gateway to hold the two hanging rollouts")
        busy = await http.post(f"{url}/slime/reward", json={"prompt": QUESTION, "response": RIGHT, "label": "42"})
        late = await slow
        took = time.monotonic() - started
        after = await http.post(f"{url}/slime/reward", json={"prompt": QUESTION, "response": RIGHT, "label": "42"})
    assert busy.status_code == 429 and busy.headers["Retry-After"] == "3", busy.text
    # Answered at its deadline (4 s), long before the judge's call would give up (60 s): the upper bound is generous
    # for a loaded machine.
    assert late.status_code == 200 and 4 <= took < 30, (late.text, took)
    answer = late.json()
    assert answer["rewards"] == [0.0, 0.0]
    assert answer["extra_logs"]["rubricd/timed_out"] == [1.0, 1.0]
    assert answer["extra_logs"]["rubricd/no_reward"] == [1.0, 1.0]
    assert after.status_code == 200 and after.json() == 1.0  # the bound is free again


async def test_a_bad_request_is_refused_naming_it(start_gateway):
    url = start_gateway()
    async with httpx.AsyncClient(timeout=10) as http:
        short = await http.post(
            f"{url}/get_reward", json={"query": ["a", "b"], "prompts": ["a"], "labels": [None, None]}
        )
        bad_run = await http.post(
            f"{url}/slime/reward", json={"prompt": "p", "response": "r"}, headers={"X-Rubricd-Run": "no spaces"}
        )
        get = await http.get(f"{url}/get_reward")
        no_time = await http.post(
            f"{url}/slime/reward", json={"prompt": "p", "response": "r"}, headers={"X-Rubricd-Deadline": "-1"}
        )
    assert short.status_code == 422 and "length" in short.json()["error"]
    assert bad_run.status_code == 422 and "run" in bad_run.json()["error"]
    assert get.status_code == 405
    assert no_time.status_code == 422 and "deadline" in no_time.json()["error"]


async def test_rubric_arm_rewards_over_http_and_a_rollout_of_the_other_phase_fails_loudly(
    start_service, start_gateway, cli, tmp_path
):
    pairs = tmp_path / "preferences.jsonl"
    line = {"prompt": "Name the largest planet.", "chosen": "Jupiter.", "rejected": "It is Saturn, I think. " * 8}
    pairs.write_text(json.dumps(line) + "\n")
    for args in (["import", "arm-http", str(pairs)], ["phases", "arm-http", "--first", "generator", "--steps", "5"]):
        cli("arm", *args)
    start_service("arm")
    url = start_gateway()
    drafted = {
        "criterion": "The response is concise and brief.",
        "points": 3,
        "meta_class": "accuracy",
        "rule": "principle",
    }
    generator = {
        "phase": "generator",
        "completion": json.dumps({"rubrics": [drafted]}),
        "prompt_id": prompt_key("Name the largest planet."),
    }
    judge = {"phase": "judge", "completion": "{}", "comparison_id": "x", "generator_model": "g"}
    async with httpx.AsyncClient(timeout=60) as http:
        ok = await http.post(f"{url}/arm/reward?run=arm-http&step=0", json={"rollouts": [generator]})
        refused = await http.post(f"{url}/arm/reward?run=arm-http&step=1", json={"rollouts": [judge]})
    assert ok.status_code == 200, ok.text
    answer = ok.json()
    assert answer["rewards"] == [1.0]  # the short answer is preferred and the concision rubric picks it
    [reward] = answer["arm_rewards"]
    assert (reward["phase"], reward["judged"], reward["correct"], reward["judge_model"]) == (
        "generator",
        1,
        1,
        "rubricd-simulator",
    )
    assert refused.status_code == 422 and "step 1 trains the generator" in refused.json()["error"]
