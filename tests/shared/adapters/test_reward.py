"""What every adapter shares, seen through TRL's: the run's options, steps closed when a later one begins, each
rank's part."""

from types import SimpleNamespace

import pytest

from rubricd.adapters import VerlReward, trl_reward
from rubricd.adapters.reward import RewardOptions

pytestmark = pytest.mark.integration

PROMPTS = ["What is 17 + 25?", "What is 6 x 7?"]
ANSWERS = ["42", "42"]


def test_the_runs_options_are_frozen_and_checked_once_against_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    options = RewardOptions(judge_mode="group", timeout=30)
    assert (options.place(), options.placed()) == ((3, 4), True)
    with pytest.raises(AttributeError):
        options.judge_mode = "single"  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"rank 4 is not in \[0, world_size=4\)"):
        RewardOptions(rank=4)
    with pytest.raises(TypeError, match="judge_mod"):
        RewardOptions(judge_mod="group")  # type: ignore[call-arg]
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert (RewardOptions().place(), RewardOptions().placed()) == ((0, 1), False)  # a closer of its own
    assert RewardOptions(world_size=1).placed()


async def test_steps_close_when_a_later_step_begins_and_on_finish(redis, keys, client, published, closed) -> None:
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


async def test_each_rank_closes_its_own_part_of_a_step(redis, keys, client, monkeypatch, published, closed) -> None:
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
    with pytest.raises(TypeError, match="judge_mod"):  # a misspelt option is refused, as it always was
        VerlReward(client, "bad", judge_mod="group")


async def test_workers_that_know_neither_rank_nor_count_close_each_as_a_closer_of_its_own(
    redis, keys, client, monkeypatch, published, closed
) -> None:
    """verl's reward workers (Ray actors, no RANK or WORLD_SIZE) each close their own rollouts of a step: each its
    own closer id, so that their closures add up; a process that says it is alone closes the whole step."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    workers = [VerlReward(client, "verl") for _ in range(2)]
    for step in (0, 1):
        for worker in workers:
            worker.compute_score("math", "42", "42", {"question": PROMPTS[0], "global_step": step})
    for worker in workers:
        worker.finish()
    steps = await closed(redis, keys)
    by_closer: dict[str, set[int]] = {}
    for c in steps:
        assert c.part is None and c.closer is not None and c.rollouts == 1, c
        by_closer.setdefault(c.closer, set()).add(c.step)
    assert list(by_closer.values()) == [{0, 1}, {0, 1}]  # two closers, each closing both steps
    ids = {r.rollout_id for r in await published(redis, keys) if r.step == 0}
    assert {i for c in steps if c.step == 0 for i in c.rollout_ids} == ids and len(ids) == 2
    alone = VerlReward(client, "alone", world_size=1)
    alone.compute_score("math", "42", "42", {"question": PROMPTS[0], "global_step": 0})
    alone.finish()
    assert [(c.part, c.closer) for c in await closed(redis, keys) if c.run_id == "alone"] == [(None, None)]


async def test_an_adapter_sets_its_runs_reward_policy_on_every_rollout(redis, keys, client, published) -> None:
    reward = trl_reward(client, "alt", reference_column="answer", reward_policy="alternating")
    state = SimpleNamespace(global_step=0)
    rewards = reward(prompts=PROMPTS, completions=["42", "41"], trainer_state=state, answer=ANSWERS)
    assert all(r is not None for r in rewards)
    assert {r.reward_policy for r in await published(redis, keys)} == {"alternating"}
    VerlReward(client, "plain").compute_score("math", "42", "42", {"question": PROMPTS[0], "global_step": 0})
    assert {r.reward_policy for r in await published(redis, keys) if r.run_id == "plain"} == {None}


async def test_trl_logs_each_batchs_figures_and_verl_gives_every_sample_the_keys_it_was_told_to_follow(
    client,
) -> None:
    logged: list[tuple[str, float]] = []
    reward = trl_reward(client, "logged", reference_column="answer")
    state = SimpleNamespace(global_step=0)
    reward(
        prompts=PROMPTS,
        completions=["42", "41"],
        trainer_state=state,
        answer=ANSWERS,
        log_metric=lambda *m: logged.append(m),
    )
    figures = dict(logged)
    assert figures["rubricd/judge_failed"] == 0.0 and figures["rubricd/rubric_version"] == 1.0
    assert [k for k in figures if k.startswith("rubricd/rubric/")]  # the seed rubrics' met rates
    verl = VerlReward(client, "followed", rubrics=["no_such_rubric"], meta_classes=["no_such_class"], failed_score=-1)
    keys = verl.compute_score("math", "42", "42", {"question": PROMPTS[0], "global_step": 0})
    assert (keys["rubric/no_such_rubric"], keys["meta/no_such_class"]) == (0.0, -1.0)  # not judged: still a number
