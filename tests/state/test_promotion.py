"""Promotion's state on a real Redis: one candidate at a time on the current version, found by its steps; a
decision writes its version and its record at once."""

import msgspec

from rubricd.keys import Keys
from rubricd.messages import Candidate, GateDecision, RubricSet
from rubricd_services.state.promotion import Candidates
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rubric_set


def made(version: int, step: int | None) -> RubricSet:
    return rubric_set(version=version, step=step)


def proposed(step: int, base: int, until: int | None = None) -> Candidate:
    return Candidate(run_id="run", step=step, until=until or step + 1, base_version=base, rubrics=made(base + 1, step))


async def test_one_candidate_at_a_time_on_the_current_version_found_by_its_steps(redis, keys: Keys) -> None:
    store, candidates = RubricStore(redis, keys), Candidates(redis, keys)
    assert await store.publish(made(1, None))
    assert not await candidates.propose(proposed(2, base=2))  # not on the current version
    assert await candidates.propose(proposed(2, base=1))
    assert not await candidates.propose(proposed(3, base=1))  # one in shadow already
    current, candidate = await store.in_force("run")
    assert current == made(1, None) and candidate == proposed(2, base=1)
    seen = await candidates.shadowing("run", None, 2)
    assert seen.pending == seen.proposed == proposed(2, base=1) and seen.decided is None
    assert (await candidates.shadowing("run", None, 3)).proposed is None
    assert [v.version for v in await store.history("run")] == [1]  # a candidate is not a version


async def test_a_decision_writes_its_version_and_its_record_at_once(redis, keys: Keys) -> None:
    store, candidates = RubricStore(redis, keys), Candidates(redis, keys)
    assert await store.publish(made(1, None))
    assert await candidates.propose(proposed(2, base=1))
    await redis.hset(keys.shadow_scores("run", 2), "r1", b"{}")
    promoted = made(2, 2)
    decided = msgspec.structs.replace(proposed(2, base=1), decision=GateDecision(outcome="promoted", step=3, version=2))
    assert not await candidates.decide(msgspec.structs.replace(decided, step=4), promoted)  # not the one in shadow
    assert await candidates.decide(decided, promoted)
    assert not await candidates.decide(decided, promoted)  # decided once
    assert (await store.in_force("run")) == (promoted, None)
    assert (await store.made_from("run", None, 2)) == promoted  # the version made from the step it was proposed at
    assert (await candidates.shadowing("run", None, 3)).decided == decided
    assert await candidates.all("run") == [decided]
    assert not await redis.exists(keys.shadow_scores("run", 2))  # its shadow scores go with it
    # a rejection makes no version, and a candidate on a version that moved on is never in force
    assert await candidates.propose(proposed(5, base=2))
    rejected = msgspec.structs.replace(proposed(5, base=2), decision=GateDecision(outcome="rejected", step=6))
    assert await candidates.decide(rejected, None)
    assert [v.version for v in await store.history("run")] == [1, 2]
    assert await candidates.all("run") == [decided, rejected]
    assert await candidates.propose(proposed(7, base=2))
    assert await store.publish(made(3, 7))  # another writer (an import) moves the set on
    assert (await store.in_force("run")) == (made(3, 7), None)
