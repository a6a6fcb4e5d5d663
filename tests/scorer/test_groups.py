"""Group judging against the real Redis and the LLM simulator: a sample group gathers in Redis and is judged once,
whichever scorers read its members and whichever of them dies; a late member is judged alone."""

import asyncio

import msgspec
import pytest

from rubricd import RubricdClient, wire
from rubricd.keys import SCORERS
from rubricd.messages import JudgeStatus, Rollout, Score, ScoredRollout
from tests.factories import rollout

pytestmark = pytest.mark.integration

QUESTION = "What is 17 + 25?"
SLOW = " [sim:latency_ms=3000]"  # the judge's call on a group holding this response takes 3 s


def member(i: int, *, group: str = "g1", size: int | None = 8, extra: str = "", run_id: str = "run") -> Rollout:
    answer = f"The sum is 42 (take {i})." if i % 2 == 0 else f"The sum is 41 (take {i})."
    return rollout(
        run_id=run_id,
        rollout_id=f"{group}-r{i}",
        prompt=QUESTION,
        response=answer + extra,
        reference="42",
        group=group,
        group_size=size,
    )


async def handed_on(redis, keys, run_id: str = "run") -> list[str]:
    """The run's rollout ids handed to the analyzers: one entry per score committed."""
    handed = [wire.decode(wire.payload(f), ScoredRollout).rollout for _, f in await redis.xrange(keys.scored)]
    return [r.rollout_id for r in handed if r.run_id == run_id]


async def judge_calls(redis, keys, run_id: str = "run") -> int:
    usage = await redis.hgetall(keys.usage(run_id))
    return sum(int(v) for k, v in usage.items() if k.decode().startswith("judge:") and k.decode().endswith(":calls"))


async def test_a_complete_group_is_judged_in_one_call_and_every_member_answered(stack, redis, keys, start_scorer):
    start_scorer(judge_mode="group")
    group = [member(i) for i in range(8)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score(group, timeout=60)
        again = await client.score_one(group[3], timeout=30)  # a replayed member: its first score
        alone = [msgspec.structs.replace(m, run_id="alone", judge_mode="single") for m in group]
        singly = await client.score(alone, timeout=60)
    assert [s.rollout_id for s in scores] == [m.rollout_id for m in group]
    assert all(s.status is JudgeStatus.OK and s.grouping and s.grouping.members == 8 for s in scores)
    # The simulator's verdicts follow content rules: side by side, each response gets what it gets alone.
    assert [s.reward for s in scores] == [s.reward for s in singly]
    assert scores[0].reward > scores[1].reward
    assert sorted(s.grouping.label for s in scores) == list("ABCDEFGH")
    assert again == scores[3]
    assert await judge_calls(redis, keys) == 1
    assert sorted(await handed_on(redis, keys)) == sorted(m.rollout_id for m in group)
    assert await redis.zcard(keys.groups_due) == 0
    assert (await redis.xpending(keys.rollouts, SCORERS))["pending"] == 0


async def test_a_group_split_across_two_scorers_one_killed_holding_members_is_judged_once(
    stack, redis, keys, start_scorer, eventually
):
    first = start_scorer(judge_mode="group", consumer="scorer-a")
    group = [member(i) for i in range(8)]
    key = keys.group("run", 0, "g1")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        early = asyncio.create_task(client.score(group[:4], timeout=90))
        await eventually(lambda: joined(redis, key, 4), "the first four members to join", every=0.05)
        first.kill()  # holding four members of an incomplete group, acked: the group's hash has them
        start_scorer(judge_mode="group", consumer="scorer-b")
        late = await client.score(group[4:], timeout=90)
        scores = await early + late
    assert [s.rollout_id for s in scores] == [m.rollout_id for m in group]
    assert all(s.status is JudgeStatus.OK and s.grouping and s.grouping.members == 8 for s in scores)
    assert sorted(await handed_on(redis, keys)) == sorted(m.rollout_id for m in group)  # each exactly once
    assert (await redis.xpending(keys.rollouts, SCORERS))["pending"] == 0
    for score in scores:
        assert wire.decode(await redis.get(keys.score("run", score.rollout_id)), Score) == score


async def test_a_scorer_killed_while_judging_a_group_leaves_it_to_another_once_its_claim_runs_out(  # its lease: 2 s
    stack, redis, keys, start_scorer, eventually
):
    settings = {"judge_mode": "group", "reclaim_idle_ms": 2000, "judge_cache_ttl_s": 0}
    scorers = {name: start_scorer(consumer=name, **settings) for name in ("scorer-a", "scorer-b")}
    group = [member(i, extra=SLOW if i == 0 else "") for i in range(8)]
    key = keys.group("run", 0, "g1")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scoring = asyncio.create_task(client.score(group, timeout=120))
        claimer = (await eventually(lambda: redis.hget(key, "~claimer"), "a scorer to claim the group")).decode()
        scorers[claimer].kill()  # mid-call: the judge takes 3 s
        assert not await redis.exists(*(keys.score("run", m.rollout_id) for m in group))
        scores = await scoring
    assert all(s.status is JudgeStatus.OK and s.grouping and s.grouping.members == 8 for s in scores)
    assert sorted(await handed_on(redis, keys)) == sorted(m.rollout_id for m in group)  # each exactly once
    assert int(await redis.hget(key, "~claims")) == 2
    assert (await redis.hget(key, "~claimer")).decode() != claimer

    async def decided() -> bool:  # the last member's score is replied before the group is decided
        return await redis.zcard(keys.groups_due) == 0

    await eventually(decided, "the group to leave the undecided")


async def test_an_incomplete_group_is_judged_at_its_deadline_and_a_late_member_alone(
    stack, redis, keys, start_scorer, eventually
):
    start_scorer(judge_mode="group", group_deadline_s=1, group_sweep_s=0.2)
    group = [member(i, size=4) for i in range(4)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        on_time = await client.score(group[:3], timeout=60)  # the fourth never came in time
        late = await client.score_one(group[3], timeout=60)
    assert all(s.status is JudgeStatus.OK and s.grouping and s.grouping.members == 3 for s in on_time)
    assert late.status is JudgeStatus.OK and late.grouping is None and late.reward == on_time[1].reward
    assert sorted(await handed_on(redis, keys)) == sorted(m.rollout_id for m in group)


async def test_members_with_the_same_response_are_judged_once_in_their_groups_call(stack, redis, keys, start_scorer):
    start_scorer(judge_mode="group")
    group = [msgspec.structs.replace(member(i), response="The sum is 42.") for i in range(8)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score(group, timeout=60)
    assert [s.rollout_id for s in scores] == [m.rollout_id for m in group]
    assert {(s.reward, s.grouping) for s in scores} == {(scores[0].reward, None)}  # one response: judged alone
    assert await judge_calls(redis, keys) == 1


async def test_votes_and_single_mode_for_a_run_that_chooses_them(stack, redis, keys, start_scorer):
    start_scorer(judge_mode="group")
    voted = [msgspec.structs.replace(member(i, group="v", size=2), judge_votes=3) for i in range(2)]
    alone = [
        msgspec.structs.replace(member(i, group="s", size=2, run_id="solo"), judge_mode="single") for i in range(2)
    ]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score(voted + alone, timeout=60)
    assert [(s.votes, s.agreement, bool(s.grouping)) for s in scores] == [(3, 1.0, True)] * 2 + [(1, None, False)] * 2
    assert await judge_calls(redis, keys) == 3  # one group, three votes
    assert await judge_calls(redis, keys, "solo") == 2


async def joined(redis, key: str, n: int) -> bool:
    return await redis.hget(key, "~n") == str(n).encode()
