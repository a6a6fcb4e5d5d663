"""verl's reward function, called the way verl calls it, against a real scorer, Redis and the LLM simulator."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from rubricd.adapters import VerlReward, trl_reward
from rubricd.messages import JudgeStatus, Score

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
