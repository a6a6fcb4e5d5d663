"""The sample group each trainer's adapter sets, from what the trainer knows, without a broker."""

import logging
from types import SimpleNamespace

import pytest

from rubricd.adapters.reward import Sample, group_id
from rubricd.adapters.trl import TrlGroups, trl_groups
from rubricd.adapters.verl import VerlReward
from rubricd.client import InvalidRollout, grouped
from rubricd.messages import Rollout
from tests.factories import rollout


def batch(prompts: list[str], generations: int) -> list[Sample]:
    """A TRL call's samples: each prompt's completions consecutive, as its RepeatSampler lays them out."""
    return [Sample(p, f"answer {i}") for p in prompts for i in range(generations)]


def groups(samples: list[Sample]) -> list[tuple[str | None, int | None]]:
    return [(s.group, s.group_size) for s in samples]


def test_trl_two_prompts_of_four_generations_are_two_groups_of_four() -> None:
    placed = trl_groups(batch(["p", "q"], 4), 4, rank=0, call="train0")
    assert placed is not None
    assert groups(placed) == [("train0.0", 4)] * 4 + [("train0.1", 4)] * 4


def test_a_trl_group_straddling_two_processes_has_one_id_on_both() -> None:
    # TRL's own figure: 3 completions per process, 2 per prompt; prompt 1's pair is split between ranks 0 and 1.
    rank0 = trl_groups([Sample("p0", "a"), Sample("p0", "b"), Sample("p1", "c")], 2, rank=0, call="train0")
    rank1 = trl_groups([Sample("p1", "d"), Sample("p2", "e"), Sample("p2", "f")], 2, rank=1, call="train0")
    assert rank0 is not None and rank1 is not None
    assert [s.group for s in rank0 + rank1] == ["train0.0", "train0.0", "train0.1", "train0.1", "train0.2", "train0.2"]


def test_a_call_whose_groups_do_not_share_their_prompt_gets_none() -> None:
    assert trl_groups([Sample("p", "a"), Sample("q", "b")], 2, rank=0, call="train0") is None


class _Trainer:
    def __init__(self, generations: int, eval_generations: int | None = None, rank: int = 0) -> None:
        self.num_generations, self.num_generations_eval = generations, eval_generations
        self.accelerator = SimpleNamespace(process_index=rank)


def test_trl_groups_take_the_trainers_generations_and_are_unique_within_a_step() -> None:
    trl = TrlGroups(None, rank=0)
    trainer = _Trainer(generations=2, eval_generations=4)
    first = trl.place(batch(["p", "q"], 2), 5, False, trainer)
    second = trl.place(batch(["p", "q"], 2), 5, False, trainer)  # steps_per_generation below the accumulation
    evaluated = trl.place(batch(["p"], 4), 5, True, trainer)
    next_step = trl.place(batch(["p", "q"], 2), 6, False, trainer)
    assert groups(first) == [("train0.0", 2)] * 2 + [("train0.1", 2)] * 2
    assert {s.group for s in second} == {"train1.0", "train1.1"}
    assert groups(evaluated) == [("eval0.0", 4)] * 4  # num_generations_eval
    assert {s.group for s in next_step} == {"train0.0", "train0.1"}  # unique within its own step
    rank1 = TrlGroups(None, rank=0).place(batch(["r"], 2), 5, False, _Trainer(generations=4, rank=1))
    assert [s.group for s in rank1] == ["train0.0"] * 2  # rank 1's 2 are the group's last 2 of 4


def test_without_a_trainer_or_num_generations_trl_sends_no_groups_and_given_it_uses_it(caplog) -> None:
    samples = batch(["p"], 2)
    assert TrlGroups(None, rank=0).place(samples, 0, False, None) == samples
    assert groups(TrlGroups(2, rank=0).place(samples, 0, False, None)) == [("train0.0", 2)] * 2
    with caplog.at_level(logging.WARNING, "rubricd.adapters"):
        mixed = [Sample("p", "a"), Sample("q", "b")]
        assert TrlGroups(2, rank=0).place(mixed, 0, False, None) == mixed
    assert "different prompts" in caplog.text


def test_verl_groups_by_uid_of_rollout_n_and_by_another_field_if_told() -> None:
    client = SimpleNamespace(aio=None)  # no call is made
    reward = VerlReward(client, "ppo", group_size=4)  # type: ignore[arg-type]
    uid = "6f1c0a8e-3b5d-4f1e-9a4c-2d7b8e9f0a1b"
    assert groups([reward._sample("src", "a", "42", {"question": "q", "uid": uid})]) == [(uid, 4)]
    assert groups([reward._sample("src", "a", "42", {"question": "q"})]) == [(None, None)]  # no uid, no group
    by_index = VerlReward(client, "ppo", group_field="index")  # type: ignore[arg-type]
    assert groups([by_index._sample("src", "a", "42", {"index": 17})]) == [("17", None)]


def test_a_group_identity_outside_the_alphabet_is_hashed_the_same_each_time() -> None:
    assert group_id("abc-1") == "abc-1" and group_id(7) == "7" and group_id(None) is None
    assert group_id("a b") == group_id("a b") != group_id("a c") and group_id("a b").startswith("h-")


def member(rid: str, group: str | None, size: int | None) -> Rollout:
    return rollout(rollout_id=rid, group=group, group_size=size)


def test_the_client_refuses_a_group_that_disagrees_on_its_size_or_outnumbers_it() -> None:
    grouped([member("a", "g", 2), member("b", "g", 2), member("a", "g", 2), member("c", "h", None)])
    with pytest.raises(InvalidRollout, match=r"sizes \[2, 3\]"):
        grouped([member("a", "g", 2), member("b", "g", 3)])
    with pytest.raises(InvalidRollout, match="3 rollouts, more than its size 2"):
        grouped([member("a", "g", 2), member("b", "g", 2), member("c", "g", None)])
