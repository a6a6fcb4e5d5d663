"""TRL's reward functions, called the way TRL calls them, against a real scorer, Redis and the LLM simulator."""

import asyncio
from types import SimpleNamespace

import pytest

from rubricd.adapters import async_trl_reward, trl_reward

pytestmark = pytest.mark.integration

PROMPTS = ["What is 17 + 25?", "What is 6 x 7?"]
ANSWERS = ["42", "42"]


async def test_trl_reward_scores_a_batch_at_once_with_fresh_rollout_ids(redis, keys, client, published) -> None:
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


class _Trainer:
    """What a TRL trainer shows a reward function: `log_metric`, a method of the trainer whose model trains or not."""

    def __init__(self, training: bool) -> None:
        self.model = SimpleNamespace(training=training)

    def log_metric(self, name: str, value: float) -> None:
        pass


async def test_trl_evaluation_rollouts_are_flagged_and_never_counted_in_a_step(
    redis, keys, client, published, closed
) -> None:
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


async def test_async_trl_reward_is_a_coroutine_function_awaited_on_the_trainers_loop(
    redis, keys, client, published
) -> None:
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
