"""The rubric store on a real Redis: the version made from a step, found by its field however many versions exist;
candidates in shadow and their decisions (promotion gated)."""

import msgspec

from rubricd.keys import Keys
from rubricd.messages import Candidate, GateDecision, Rubric, RubricSet
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rubric_set

RUBRIC = Rubric(id="correct", criterion="The response states the correct final answer.", points=5)


def made(version: int, step: int | None) -> RubricSet:
    return rubric_set(RUBRIC, version=version, step=step)


async def test_the_version_made_from_a_step_is_found_by_its_step_in_any_order(redis, keys: Keys) -> None:
    store = RubricStore(redis, keys)
    for version, step in [(1, None), (2, 5), (3, 2), (4, 9)]:  # step 2's summary handled after step 5's
        assert await store.publish(made(version, step))
    assert (await store.made_from("run", None, 2)) == made(3, 2)
    assert (await store.made_from("run", None, 9)) == made(4, 9)
    assert await store.made_from("run", None, 7) is None
    assert await store.made_from("other", None, 2) is None
    assert [v.version for v in await store.history("run")] == [1, 2, 3, 4]  # the step fields are not versions


async def test_a_set_written_before_the_step_fields_finds_its_current_version_only(redis, keys: Keys) -> None:
    store = RubricStore(redis, keys)
    for version, step in [(1, None), (2, 3), (3, 4)]:
        assert await store.publish(made(version, step))
    await redis.hdel(keys.rubric_set("run"), "s3", "s4")  # as an older rubricd wrote it
    assert (await store.made_from("run", None, 4)) == made(3, 4)  # a redelivery of the latest step's summary
    assert await store.made_from("run", None, 3) is None


def proposed(step: int, base: int, until: int | None = None) -> Candidate:
    return Candidate(run_id="run", step=step, until=until or step + 1, base_version=base, rubrics=made(base + 1, step))


async def test_one_candidate_at_a_time_on_the_current_version_found_by_its_steps(redis, keys: Keys) -> None:
    store = RubricStore(redis, keys)
    assert await store.publish(made(1, None))
    assert not await store.propose(proposed(2, base=2))  # not on the current version
    assert await store.propose(proposed(2, base=1))
    assert not await store.propose(proposed(3, base=1))  # one in shadow already
    current, candidate = await store.in_force("run")
    assert current == made(1, None) and candidate == proposed(2, base=1)
    seen = await store.shadowing("run", None, 2)
    assert seen.pending == seen.proposed == proposed(2, base=1) and seen.decided is None
    assert (await store.shadowing("run", None, 3)).proposed is None
    assert [v.version for v in await store.history("run")] == [1]  # a candidate is not a version


async def test_a_decision_writes_its_version_and_its_record_at_once(redis, keys: Keys) -> None:
    store = RubricStore(redis, keys)
    assert await store.publish(made(1, None))
    assert await store.propose(proposed(2, base=1))
    await redis.hset(keys.shadow_scores("run", 2), "r1", b"{}")
    promoted = made(2, 2)
    decided = msgspec.structs.replace(proposed(2, base=1), decision=GateDecision(outcome="promoted", step=3, version=2))
    assert not await store.decide(msgspec.structs.replace(decided, step=4), promoted)  # not the one in shadow
    assert await store.decide(decided, promoted)
    assert not await store.decide(decided, promoted)  # decided once
    assert (await store.in_force("run")) == (promoted, None)
    assert (await store.made_from("run", None, 2)) == promoted  # the version made from the step it was proposed at
    assert (await store.shadowing("run", None, 3)).decided == decided
    assert await store.candidates("run") == [decided]
    assert not await redis.exists(keys.shadow_scores("run", 2))  # its shadow scores go with it
    # a rejection makes no version, and a candidate on a version that moved on is never in force
    assert await store.propose(proposed(5, base=2))
    rejected = msgspec.structs.replace(proposed(5, base=2), decision=GateDecision(outcome="rejected", step=6))
    assert await store.decide(rejected, None)
    assert [v.version for v in await store.history("run")] == [1, 2]
    assert await store.candidates("run") == [decided, rejected]
    assert await store.propose(proposed(7, base=2))
    assert await store.publish(made(3, 7))  # another writer (an import) moves the set on
    assert (await store.in_force("run")) == (made(3, 7), None)
