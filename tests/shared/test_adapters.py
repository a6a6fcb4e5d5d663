"""The trainer adapters, called the way TRL and verl call them, against a real scorer, Redis and the LLM simulator."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import httpx
import pytest

from rubricd import SyncRubricdClient, wire
from rubricd.adapters import VerlReward, async_trl_reward, text, trl_reward
from rubricd.messages import JudgeStatus, Rollout, Score, StepClosed

pytestmark = pytest.mark.integration

PROMPTS = ["What is 17 + 25?", "What is 6 x 7?"]
ANSWERS = ["42", "42"]


@pytest.fixture
def client(stack, keys, start_service):
    start_service("scorer", llm__max_retries=1)
    client = SyncRubricdClient(stack.redis_url, namespace=keys.namespace)
    yield client
    client.close()


async def published(redis, keys) -> list[Rollout]:
    return [wire.decode(wire.payload(f), Rollout) for _, f in await redis.xrange(keys.rollouts)]


async def closed(redis, keys) -> list[StepClosed]:
    return [wire.decode(wire.payload(f), StepClosed) for _, f in await redis.xrange(keys.steps)]


def test_text_of_standard_and_conversational_inputs() -> None:
    assert text("What is 2 + 2?") == "What is 2 + 2?"
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    assert text(prompt) == "system: Be brief.\n\nuser: What is 2 + 2?"
    assert text([{"role": "assistant", "content": "4"}], roles=False) == "4"
    assert (
        text([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and this?"}]}])
        == "user: and this?"
    )


def test_verl_reward_reads_the_fields_it_is_told_to_and_keeps_the_old_keyword_names(client) -> None:
    info = {"question": "q", "prompt": "p", "global_step": 3, "step": 5, "instance_key": "i", "uid": "u"}
    new = VerlReward(client, "ppo", prompt_field="prompt", step_field="step", instance_key_field="uid")
    old = VerlReward(client, "ppo", prompt_key="prompt", step_key="step", instance_key="uid")
    for reward in (new, old):
        assert reward._step(info) == 5
        assert reward._sample("src", "answer", None, info)[:4] == ("p", "answer", None, "u")
    assert VerlReward(client, "ppo")._sample("src", "a", 42, info)[:4] == ("q", "a", "42", "i")


async def test_trl_reward_scores_a_batch_at_once_with_fresh_rollout_ids(redis, keys, client) -> None:
    reward = trl_reward(client, "grpo", reference_column="answer")
    assert reward.__name__ == "rubricd"  # TRL logs rewards/rubricd/mean
    state = SimpleNamespace(global_step=0)
    completions = ["17 + 25 = 42. The answer is 42.", "It is 41."]
    first = reward(
        prompts=PROMPTS, completions=completions, completion_ids=[[1], [2]], trainer_state=state, answer=ANSWERS
    )
    again = reward(
        prompts=PROMPTS, completions=completions, completion_ids=[[1], [2]], trainer_state=state, answer=ANSWERS
    )
    assert first == again and first[0] > first[1]  # right beats wrong; equal inputs, equal rewards
    rollouts = await published(redis, keys)
    assert (
        len({r.rollout_id for r in rollouts}) == 4
    )  # a second call at the same step is scored anew, not answered from the first
    assert [r.reference for r in rollouts] == ANSWERS * 2 and {r.step for r in rollouts} == {0}
    assert len({r.published_at for r in rollouts[:2]}) == 1  # one batch, one publish


async def test_steps_close_when_a_later_step_begins_and_on_finish(redis, keys, client) -> None:
    reward = trl_reward(client, "grpo", reference_column="answer")
    for step in (0, 0, 1):  # two calls in step 0 (gradient accumulation), then step 1
        reward(
            prompts=PROMPTS, completions=["42", "42"], trainer_state=SimpleNamespace(global_step=step), answer=ANSWERS
        )
    [zero] = await closed(redis, keys)
    step0_ids = {r.rollout_id for r in await published(redis, keys) if r.step == 0}
    assert (zero.run_id, zero.step, zero.rollouts, set(zero.rollout_ids)) == ("grpo", 0, 4, step0_ids)
    reward.finish()
    assert [(c.step, c.rollouts) for c in await closed(redis, keys)] == [(0, 4), (1, 2)]


async def test_each_rank_closes_its_own_part_of_a_step(redis, keys, client, monkeypatch) -> None:
    """Under torchrun each process scores its share of a step: rank 1 of 2 closes part 1 of 2, with its ids."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    reward = trl_reward(client, "ddp", reference_column="answer")
    for step in (0, 1):
        reward(
            prompts=PROMPTS, completions=["42", "41"], trainer_state=SimpleNamespace(global_step=step), answer=ANSWERS
        )
    reward.finish()
    mine = {s: {r.rollout_id for r in await published(redis, keys) if r.step == s} for s in (0, 1)}
    assert [(c.step, c.part, c.parts, c.rollouts, set(c.rollout_ids)) for c in await closed(redis, keys)] == [
        (0, 1, 2, 2, mine[0]),
        (1, 1, 2, 2, mine[1]),
    ]
    single = trl_reward(client, "single", reference_column="answer", rank=0, world_size=1)  # beats the environment
    single(prompts=PROMPTS, completions=["42", "42"], trainer_state=SimpleNamespace(global_step=0), answer=ANSWERS)
    single.finish()  # type: ignore[attr-defined]
    assert [(c.part, c.parts) for c in await closed(redis, keys) if c.run_id == "single"] == [(None, None)]
    with pytest.raises(ValueError, match="rank 2 is not in"):
        trl_reward(client, "bad", rank=2, world_size=2)


class _Trainer:
    """What a TRL trainer shows a reward function: `log_metric`, a method of the trainer whose model trains or not."""

    def __init__(self, training: bool) -> None:
        self.model = SimpleNamespace(training=training)

    def log_metric(self, name: str, value: float) -> None:
        pass


async def test_trl_evaluation_rollouts_are_flagged_and_never_counted_in_a_step(redis, keys, client) -> None:
    reward = trl_reward(client, "evals", reference_column="answer")
    state = SimpleNamespace(global_step=3)
    train, evaluate = _Trainer(training=True), _Trainer(training=False)
    reward(prompts=PROMPTS, completions=["42", "41"], trainer_state=state, answer=ANSWERS, log_metric=train.log_metric)
    scored = reward(
        prompts=PROMPTS, completions=["42", "41"], trainer_state=state, answer=ANSWERS, log_metric=evaluate.log_metric
    )
    final = SimpleNamespace(global_step=4)  # TRL's final evaluation, at a step no training rollout has
    reward(prompts=PROMPTS, completions=["42"] * 2, trainer_state=final, answer=ANSWERS, log_metric=evaluate.log_metric)
    reward.finish()  # type: ignore[attr-defined]
    assert scored == [5 / 7, 0.0]  # scored with the run's rubrics like any other (right, no reasoning: 5 of 7)
    rollouts = await published(redis, keys)
    assert [(r.step, r.evaluation) for r in rollouts] == [(3, False)] * 2 + [(3, True)] * 2 + [(4, True)] * 2
    training = {r.rollout_id for r in rollouts if not r.evaluation}
    assert [(c.step, set(c.rollout_ids)) for c in await closed(redis, keys)] == [(3, training)]  # no step 4
    assert all(s.evaluation for s in client.score(rollouts[2:], timeout=30))  # their Scores say so


async def test_async_trl_reward_is_a_coroutine_function_awaited_on_the_trainers_loop(redis, keys, client) -> None:
    reward = async_trl_reward(client, "grpo-async", reference_column="answer", name="rubric_reward")
    assert (
        asyncio.iscoroutinefunction(reward) and reward.__name__ == "rubric_reward"
    )  # how TRL tells async reward functions
    prompts = [[{"role": "user", "content": p}] for p in PROMPTS]
    completions = [[{"role": "assistant", "content": "42"}], [{"role": "assistant", "content": "I think 40."}]]
    rewards = await reward(
        prompts=prompts, completions=completions, trainer_state=SimpleNamespace(global_step=2), answer=ANSWERS
    )
    assert rewards[0] > rewards[1]
    assert [r.prompt for r in await published(redis, keys)] == [f"user: {p}" for p in PROMPTS]


# What every VerlReward result holds, whatever its status or rubric set (verl's reward loop and validation need it).
VERL_KEYS = {"score", "judge_ok", "masked", "rubric_version", "weighted_total"}


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


async def test_an_adapter_sets_its_runs_reward_policy_on_every_rollout(redis, keys, client) -> None:
    reward = trl_reward(client, "alt", reference_column="answer", reward_policy="alternating")
    state = SimpleNamespace(global_step=0)
    rewards = reward(prompts=PROMPTS, completions=["42", "41"], trainer_state=state, answer=ANSWERS)
    assert all(r is not None for r in rewards)
    assert {r.reward_policy for r in await published(redis, keys)} == {"alternating"}
    VerlReward(client, "plain").compute_score("math", "42", "42", {"prompt": PROMPTS[0], "step": 0})
    assert {r.reward_policy for r in await published(redis, keys) if r.run_id == "plain"} == {None}


async def test_verl_per_sample_calls_wait_concurrently(stack, redis, keys, client) -> None:
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


async def test_verl_async_form_and_batch_form(redis, keys, client) -> None:
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
