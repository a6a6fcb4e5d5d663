"""TRL's reward functions, called the way TRL calls them, against a real scorer, Redis and the LLM simulator."""

import asyncio
import threading
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
    assert all(r.trajectory == [] and r.prompt == p for r, p in zip(rollouts, PROMPTS * 2))  # text stays text


class _Trainer:
    """What a TRL trainer shows a reward function: `log_metric`, a method of the trainer whose model trains or not,
    and which offers its `tools` (functions in TRL; specs here, as this venv has no transformers to read a
    function's: the real trainer's are tests/system/test_trl.py's)."""

    def __init__(self, training: bool, tools: list | None = None) -> None:
        self.model = SimpleNamespace(training=training)
        self.tools = tools or []

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
    redis, keys, aio, published, closed
) -> None:
    before = set(threading.enumerate())
    reward = async_trl_reward(aio, "grpo-async", reference_column="answer", name="rubric_reward")
    assert (
        asyncio.iscoroutinefunction(reward) and reward.__name__ == "rubric_reward"
    )  # how TRL tells async reward functions
    prompts = [[{"role": "user", "content": p}] for p in PROMPTS]
    completions = [[{"role": "assistant", "content": "42"}], [{"role": "assistant", "content": "I think 40."}]]
    rewards = await reward(
        prompts=prompts, completions=completions, trainer_state=SimpleNamespace(global_step=2), answer=ANSWERS
    )
    await reward.finish()  # type: ignore[attr-defined]
    assert set(threading.enumerate()) == before  # on this loop: no "rubricd-client" thread, none else
    assert rewards[0] > rewards[1]
    assert [r.prompt for r in await published(redis, keys)] == [f"user: {p}" for p in PROMPTS]
    assert [(c.run_id, c.step, c.rollouts) for c in await closed(redis, keys)] == [("grpo-async", 2, 2)]


async def test_async_trl_reward_on_a_sync_client_still_scores_with_a_warning(redis, keys, client, closed) -> None:
    with pytest.warns(DeprecationWarning, match="async_trl_reward on a SyncRubricdClient runs rubricd's calls"):
        reward = async_trl_reward(client, "grpo-async-old", reference_column="answer")
    rewards = await reward(prompts=PROMPTS, completions=["42", "40"], trainer_state=None, answer=ANSWERS)
    assert rewards[0] > rewards[1]
    reward.finish()  # type: ignore[attr-defined]  # as the old form was called: the step is closed on return
    assert [(c.run_id, c.step, c.rollouts) for c in await closed(redis, keys)] == [("grpo-async-old", 0, 2)]


ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
# A completion as GRPOTrainer's tool loop builds it (trl 1.16, `_tool_call_loop`): the parsed assistant message
# (`parse_response`: content "", the call's arguments an object, no id), the tool's answer naming the tool
# (`str(result)`), then the parsed message the model wrote after it (here with its reasoning, as Qwen3's parser
# gives it).
TOOL_COMPLETION = [
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 17, "b": 25}}}],
    },
    {"role": "tool", "name": "add", "content": "42"},
    {"role": "assistant", "content": "The answer is 42.", "reasoning_content": "add said 42."},
]


async def test_a_tool_calling_completion_is_its_trajectory_with_the_tools_the_trainer_offered(
    redis, keys, client, published
) -> None:
    reward = trl_reward(client, "tools", reference_column="answer")
    prompts = [[{"role": "system", "content": "Use the tools."}, {"role": "user", "content": p}] for p in PROMPTS]
    completions = [TOOL_COMPLETION, [{"role": "assistant", "content": "I think 40."}]]
    trainer = _Trainer(training=True, tools=[ADD])
    rewards = reward(prompts=prompts, completions=completions, answer=ANSWERS, log_metric=trainer.log_metric)
    assert all(r is not None for r in rewards)
    called, guessed = await published(redis, keys)
    assert [t.role for t in called.trajectory] == ["system", "user", "assistant", "tool", "assistant"]
    assert (called.prompt_turns, called.policy_turns) == (2, [2, 4])
    assert called.trajectory[2].tool_calls[0].function.arguments == {"a": 17, "b": 25}
    assert (called.trajectory[3].name, called.trajectory[4].reasoning) == ("add", "add said 42.")
    assert [t.function.name for t in called.tools] == ["add"] and guessed.tools == called.tools
    assert (guessed.prompt_turns, guessed.policy_turns) == (2, [2])
    # The text is what it was before trajectories (the instance key, a hash of the prompt, with it).
    assert called.prompt == "system: Use the tools.\n\nuser: What is 17 + 25?"
    assert called.response == (
        'assistant: [tool_call add({"a": 17, "b": 25})]\n\ntool add: 42\n\nassistant: The answer is 42.'
    )


async def test_the_tools_given_to_the_reward_are_the_ones_offered_whatever_the_trainer_says(
    redis, keys, client, published
) -> None:
    reward = trl_reward(client, "given-tools", reference_column="answer", tools=[ADD])
    prompts = [[{"role": "user", "content": PROMPTS[0]}]]
    reward(prompts=prompts, completions=[TOOL_COMPLETION], answer=ANSWERS[:1], log_metric=_Trainer(True).log_metric)
    [rollout] = await published(redis, keys)
    assert [t.function.name for t in rollout.tools] == ["add"]


async def test_a_sample_whose_messages_cannot_be_turns_is_scored_as_text_with_a_warning(
    redis, keys, client, published, caplog
) -> None:
    reward = trl_reward(client, "ipython", reference_column="answer")
    prompts = [[{"role": "user", "content": p}] for p in PROMPTS]
    llama = [{"role": "assistant", "content": "Adding."}, {"role": "ipython", "content": "42"}]  # not a role here
    with caplog.at_level("WARNING", logger="rubricd.adapters"):
        rewards = reward(prompts=prompts, completions=[llama, TOOL_COMPLETION], answer=ANSWERS)
    assert all(r is not None for r in rewards)
    text, turns = await published(redis, keys)
    assert text.trajectory == [] and text.response == "assistant: Adding.\n\nipython: 42"
    assert len(turns.trajectory) == 4
    assert "1 of 2 samples' messages are not a trajectory; scored as text" in caplog.text
    assert "sample 0: Invalid enum value 'ipython' - at `trajectory[2].role`" in caplog.text


class _GrpoTrainer(_Trainer):
    num_generations = 4


async def test_trl_sends_each_prompts_generations_as_one_group_with_the_runs_choices(
    redis, keys, client, published
) -> None:
    reward = trl_reward(client, "grpo-groups", reference_column="answer", judge_votes=1, analysis_sample="extremes")
    trainer = _GrpoTrainer(training=True)
    prompts = [p for p in PROMPTS for _ in range(4)]  # 2 prompts x 4 generations, as TRL hands them
    completions = ["42", "41", "17 + 25 = 42", "40", "42", "6 x 7 = 42", "43", "42"]
    rewards = reward(
        prompts=prompts,
        completions=completions,
        trainer_state=SimpleNamespace(global_step=0),
        answer=ANSWERS[:1] * 8,
        log_metric=trainer.log_metric,
    )
    assert len(rewards) == 8 and all(r is not None for r in rewards)
    rollouts = await published(redis, keys)
    assert [(r.group, r.group_size) for r in rollouts] == [("train0.0", 4)] * 4 + [("train0.1", 4)] * 4
    assert {(r.judge_votes, r.analysis_sample, r.judge_mode) for r in rollouts} == {(1, "extremes", None)}
