"""verl's reward function, called the way verl calls it, against a real scorer, Redis and the LLM simulator."""

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import msgspec
import pytest

from rubricd.adapters import VerlReward, trl_reward
from rubricd.messages import JudgeStatus, Score, TurnResult

pytestmark = pytest.mark.integration

PROMPTS = ["What is 17 + 25?", "What is 6 x 7?"]
ANSWERS = ["42", "42"]

# What every VerlReward result holds, whatever its status or rubric set (verl's reward loop and validation need it).
VERL_KEYS = {"score", "judge_ok", "masked", "rubric_version", "weighted_total"}


def test_verl_reward_reads_the_fields_it_is_told_to_and_keeps_the_old_keyword_names(client) -> None:
    info = {"question": "q", "prompt": "p", "global_step": 3, "step": 5, "instance_key": "i", "uid": "u"}
    new = VerlReward(client, "ppo", prompt_field="prompt", step_field="step", instance_key_field="uid")
    old = VerlReward(client, "ppo", prompt_key="prompt", step_key="step", instance_key="uid")
    for reward in (new, old):
        assert reward._step(info) == 5
        assert reward._sample("src", "answer", None, info)[:4] == ("p", "answer", None, "u")
    assert VerlReward(client, "ppo")._sample("src", "a", 42, info)[:4] == ("q", "a", "42", "i")


async def test_a_failed_judge_is_none_for_trl_and_flagged_for_verl(client) -> None:
    failing = "42 [sim:fail=500,times=9]"
    assert trl_reward(client, "fail")(prompts=PROMPTS[:1], completions=[failing], answer=ANSWERS[:1]) == [None]
    result = VerlReward(client, "fail", failed_score=-1.0).compute_score(
        "math", failing, "42", {"question": PROMPTS[0]}
    )
    assert (result["score"], result["judge_ok"]) == (-1.0, 0.0)
    assert set(result) == VERL_KEYS  # the keys of a judged sample: verl takes a batch's keys from its first


def test_a_masked_sample_is_flagged_for_verl_not_failed(client) -> None:
    masked = Score(
        run_id="ppo",
        rollout_id="r",
        step=0,
        status=JudgeStatus.OK,
        reward=None,
        rubric_version=1,
        meta_class_scores={"accuracy": 1.0},
        weighted_total=0.5,
        active_meta_class="completeness",
        masked=True,
    )
    result = VerlReward(client, "ppo", failed_score=-1.0).result(masked)
    assert (result["score"], result["judge_ok"], result["masked"]) == (-1.0, 1.0, 1.0)
    assert result["weighted_total"] == 0.5 and set(result) == VERL_KEYS


async def test_verl_per_sample_calls_wait_concurrently(stack, redis, keys, client, published) -> None:
    sim = stack.llm_base_url.removesuffix("/v1")
    httpx.post(f"{sim}/admin/reset")
    reward = VerlReward(client, "ppo")
    calls = 24
    with ThreadPoolExecutor(calls) as pool:  # verl's reward loop: many samples in flight, one call each
        results = list(
            pool.map(
                lambda i: reward.compute_score(
                    "gsm8k",
                    f"The answer is 42. [sim:latency_ms=300] ({i})",
                    "42",
                    {"question": PROMPTS[0], "global_step": 3},
                ),
                range(calls),
            )
        )
    assert all(r["judge_ok"] == 1.0 and r["score"] > 0 for r in results)
    assert all(set(r) == VERL_KEYS for r in results)
    assert (
        httpx.get(f"{sim}/admin/stats").json()["max_in_flight"] >= calls // 2
    )  # judged together, not one after another
    assert {r.step for r in await published(redis, keys)} == {3}
    assert threading.active_count() < 100


async def test_verl_async_form_and_batch_form(redis, keys, client, published, closed) -> None:
    reward = VerlReward(client, "ppo-batch")
    one = await reward.compute_score_async("gsm8k", "17 + 25 = 42", "42", {"question": PROMPTS[0], "global_step": 0})
    assert one["judge_ok"] == 1.0
    infos = [{"question": p, "global_step": 1} for p in PROMPTS] + [{"question": PROMPTS[0], "global_step": 2}]
    results = reward.compute_score_batch(
        data_sources=["gsm8k"] * 3, solution_strs=["42", "41", "42"], ground_truths=["42"] * 3, extra_infos=infos
    )
    assert results[0]["score"] > results[1]["score"] and all(set(r) == VERL_KEYS for r in [one, *results])
    batch = [r for r in await published(redis, keys) if r.step == 1]
    assert len(batch) == 2 and len({r.published_at for r in batch}) == 1  # one publish for the step's samples
    assert [(c.step, c.rollouts) for c in await closed(redis, keys)] == [(0, 1), (1, 2)]
    assert {r.metadata["data_source"] for r in batch} == {"gsm8k"}


async def test_verl_sends_the_uid_as_the_group_of_rollout_n(redis, keys, client, published) -> None:
    reward = VerlReward(client, "ppo-groups", group_size=2, judge_mode="single")
    uids = ["9b2f6d1e-uid-a", "9b2f6d1e-uid-a", "c41d7e02-uid-b", "c41d7e02-uid-b"]  # rollout.n=2, interleaved
    infos = [{"question": PROMPTS[i // 2], "global_step": 0, "uid": uid} for i, uid in enumerate(uids)]
    reward.compute_score_batch(
        data_sources=["gsm8k"] * 4, solution_strs=["42", "41", "42", "43"], ground_truths=["42"] * 4, extra_infos=infos
    )
    rollouts = await published(redis, keys)
    assert [(r.group, r.group_size, r.judge_mode) for r in rollouts] == [(u, 2, "single") for u in uids]


# What verl 0.9.1 hands a reward function for a rollout of its tool agent loop (verl_tool_agent.py's subclass keeps
# the conversation and tools in the loop's extra fields): the dataset's extra_info updated with those extra fields
# (the naive reward manager's `extra_info.update(tool_extra_fields)`: raw_prompt, turn_scores, tool_rewards, ...)
# and its num_turns; the conversation as ToolAgentLoop builds it (hermes calls: arguments an object, no ids; the
# tool's answer by its place).
RAW_PROMPT = [{"role": "user", "content": PROMPTS[0]}]
MESSAGES = [
    *RAW_PROMPT,
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 17, "b": 25}}}],
    },
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "The answer is 42."},
]
ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {}}}
AGENT_INFO = {
    "question": PROMPTS[0],
    "global_step": 5,
    "raw_prompt": RAW_PROMPT,
    "messages": MESSAGES,
    "tools": [ADD],
    "turn_scores": [],
    "tool_rewards": [0.0],
    "num_turns": 4,
    "rollout_reward_scores": {},
}


async def test_an_agent_loops_conversation_in_extra_info_is_the_rollouts_trajectory(
    redis, keys, client, published
) -> None:
    reward = VerlReward(client, "agent")
    solution = "add 17 25 tool 42 The answer is 42."  # the decoded response: every turn's tokens, flattened
    result = reward.compute_score("arithmetic", solution, "42", AGENT_INFO)
    assert result["judge_ok"] == 1.0 and set(result) == VERL_KEYS
    [rollout] = await published(redis, keys)
    assert [t.role for t in rollout.trajectory] == ["user", "assistant", "tool", "assistant"]
    assert (rollout.prompt_turns, rollout.policy_turns, rollout.step) == (1, [1, 3], 5)
    assert [t.function.name for t in rollout.tools] == ["add"]
    assert rollout.prompt == PROMPTS[0]  # the text as before: the instance key unchanged
    # The response text is the turns' (tool calls shown), not verl's flat decoded text.
    assert rollout.response.endswith("tool: 42\n\nassistant: The answer is 42.") and solution != rollout.response


async def test_an_agent_loop_scored_in_the_loop_gets_verls_reward_and_turn_scores(
    redis, keys, client, published
) -> None:
    reward = VerlReward(client, "agent-loop")
    output = SimpleNamespace(reward_score=None, extra_fields={"messages": MESSAGES, "tools": [ADD], "turn_scores": []})
    sample = {"data_source": "arithmetic", "reward_model": {"ground_truth": "42"}, "raw_prompt": RAW_PROMPT}
    score = await reward.score_agent_loop(output, sample | {"extra_info": {"question": PROMPTS[0]}})
    assert output.reward_score == reward.result(score)["score"] and score.status is JudgeStatus.OK
    assert output.extra_fields["reward_extra_info"] == reward.result(score)
    assert output.extra_fields["turn_scores"] == VerlReward.turn_scores(score)
    [rollout] = await published(redis, keys)
    assert (rollout.prompt_turns, len(rollout.trajectory)) == (1, 4)
    assert (
        rollout.response == 'assistant: [tool_call add({"a": 17, "b": 25})]\n\ntool: 42\n\nassistant: The answer is 42.'
    )
    with pytest.raises(ValueError, match="has no 'messages' extra field"):
        await reward.score_agent_loop(SimpleNamespace(reward_score=None, extra_fields={}), sample)


def test_turn_scores_are_each_policy_turns_points_in_order() -> None:
    score = Score(
        run_id="agent",
        rollout_id="r",
        step=0,
        status=JudgeStatus.OK,
        reward=0.5,
        rubric_version=1,
        turns=[TurnResult(turn=1, points=2.0, met=["args"]), TurnResult(turn=3, points=-1.0, unmet=["args"])],
    )
    assert VerlReward.turn_scores(score) == [2.0, -1.0]
    assert VerlReward.turn_scores(msgspec.structs.replace(score, turns=[])) == []
