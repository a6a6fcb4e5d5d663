"""The gathering (runtime.gathering) against the real Redis: members join and their entries are acked, a complete
gathering or its deadline (Redis's clock) hands it to one claimant under a renewed lease, a lapsed lease to the
next, the decision is committed once with its effects, and a late member is answered by the user's Lua."""

import asyncio

import pytest
from redis import exceptions as redis_errors

from rubricd_services.runtime.gathering import Claim, Claimant, Gathering, Joined, Lua, Retries
from rubricd_services.runtime.outage import Outages

CONSUMERS = "workers"

# The user's Lua: a late member is recorded in a set (and its entry acked); the decision appends to a stream.
LATE = Lua(keys="late", body="redis.call('SADD', k_late, a_member)\nack(k_stream, a_consumer_group, a_entry_id)")
DECISION = Lua(
    keys="decisions",
    args="verdict",
    lists="chosen",
    body="redis.call('XADD', k_decisions, '*', 'verdict', a_verdict, 'chosen', table.concat(l_chosen, ','), "
    "'members', table.concat(members(k_gathering), ','))",
)


@pytest.fixture
def stream(keys) -> str:
    return f"{keys.namespace}:entries"


def gathering(redis, keys, stream: str, claimant: str = "a", **times: float) -> Gathering:
    return Gathering(
        redis,
        f"{keys.namespace}:due",
        claimant,
        deadline_s=times.get("deadline_s", 60),
        lease_s=times.get("lease_s", 60),
        ttl_s=600,
        key=lambda name: f"{keys.namespace}:gathering:{name}",
        stream=stream,
        consumer_group=CONSUMERS,
        late=LATE,
        decision=DECISION,
    )


async def entries(redis, stream: str, n: int) -> list[bytes]:
    """N entries of `stream`, read by a consumer of its group: pending until acked."""
    await redis.xgroup_create(stream, CONSUMERS, id="0", mkstream=True)
    for i in range(n):
        await redis.xadd(stream, {"i": i})
    [[_, read]] = await redis.xreadgroup(CONSUMERS, "c", {stream: ">"})
    return [entry_id for entry_id, _ in read]


async def join(g: Gathering, keys, member: str, entry_id: bytes, size: int | None = 3) -> Joined:
    return await g.join("g", member, f"value of {member}".encode(), size=size, entry_id=entry_id, keys=late_key(keys))


def late_key(keys) -> dict[str, str]:
    return {"late": f"{keys.namespace}:late"}


async def pending(redis, stream: str) -> int:
    return (await redis.xpending(stream, CONSUMERS))["pending"]


async def redis_now(redis) -> float:
    seconds, micros = await redis.time()
    return seconds + micros / 1_000_000


async def test_members_join_with_their_entries_acked_and_a_complete_gathering_is_due_at_once(redis, keys, stream):
    g = gathering(redis, keys, stream)
    ids = await entries(redis, stream, 3)
    assert await join(g, keys, "r0", ids[0]) is Joined.IN
    assert await join(g, keys, "r0", ids[0]) is Joined.IN  # a member redelivered counts once
    assert await join(g, keys, "r1", ids[1]) is Joined.IN
    assert await pending(redis, stream) == 1 and await g.due(10) == []
    assert await join(g, keys, "r2", ids[2]) is Joined.COMPLETE
    assert await pending(redis, stream) == 0 and await g.due(10) == ["g"]
    claim = await g.claim("g")
    assert claim is not None and (claim.claims, claim.failed) == (1, 0)
    assert claim.members == {f"r{i}": f"value of r{i}".encode() for i in range(3)}


async def test_an_incomplete_gathering_is_due_at_its_deadline_by_redis_clock(redis, keys, stream, eventually):
    g = gathering(redis, keys, stream, deadline_s=0.5)
    [entry] = await entries(redis, stream, 1)
    before = await redis_now(redis)
    assert await join(g, keys, "r0", entry, size=None) is Joined.IN
    deadline = await redis.zscore(g.due_key, "g")
    assert before + 0.5 <= deadline <= await redis_now(redis) + 0.5  # Redis's time, not this host's
    assert await g.claim("g") is None  # not due yet
    await eventually(lambda: g.due(10), "the deadline to pass", every=0.05)
    assert await g.claim("g") is not None


async def test_a_claimant_that_found_it_complete_claims_it_before_its_deadline_unless_claimed_before(
    redis, keys, stream
):
    g = gathering(redis, keys, stream, lease_s=0.2)
    [entry] = await entries(redis, stream, 1)
    await join(g, keys, "r0", entry, size=None)
    assert await g.claim("g", complete=True) is not None
    await g.release("g", 60, failed=False)  # retried in a minute: complete or not, not before
    assert await g.claim("g", complete=True) is None


async def test_one_claimant_and_a_lapsed_lease_goes_to_the_next(redis, keys, stream, eventually):
    a, b = (gathering(redis, keys, stream, name, lease_s=0.5) for name in "ab")
    ids = await entries(redis, stream, 3)
    for i, entry_id in enumerate(ids):
        await join(a, keys, f"r{i}", entry_id)
    claims = await asyncio.gather(a.claim("g"), b.claim("g"), a.claim("g"), b.claim("g"))
    assert sum(c is not None for c in claims) == 1
    key = a.key("g")
    holder = (await redis.hget(key, "~claimer")).decode()
    holding, other = (a, b) if holder == "a" else (b, a)
    assert await other.claim("g") is None
    claim = await eventually(lambda: other.claim("g"), "the lease to lapse", every=0.05)  # its holder died
    assert claim.claims == 2 and (await redis.hget(key, "~claimer")).decode() != holder
    await holding.release("g", 0, failed=True)  # not its claim any more: nothing changes
    assert await redis.hget(key, "~failed") is None


async def test_a_lease_is_renewed_while_its_claimant_works(redis, keys, stream):
    # A lease of 3 s renewed every second: a renewal late by up to 2 s (a busy machine) still holds it.
    a, b = (gathering(redis, keys, stream, name, lease_s=3) for name in "ab")
    [entry] = await entries(redis, stream, 1)
    await join(a, keys, "r0", entry, size=1)
    assert await a.claim("g") is not None
    async with a.held("g"):
        for _ in range(12):  # twice the lease
            await asyncio.sleep(0.5)
            assert await b.claim("g") is None
    assert await a.decide(
        "g", keys={"decisions": f"{keys.namespace}:decisions"}, args={"verdict": "v"}, lists={"chosen": []}
    )


async def test_a_failed_decision_is_released_counted_and_due_again_later(redis, keys, stream, eventually):
    g = gathering(redis, keys, stream)
    [entry] = await entries(redis, stream, 1)
    await join(g, keys, "r0", entry, size=1)
    assert await g.claim("g") is not None
    await g.release("g", 0.3, failed=True)
    assert await g.claim("g") is None
    claim = await eventually(lambda: g.claim("g"), "the retry", every=0.05)
    assert (claim.claims, claim.failed) == (2, 1)
    await g.release("g", 0, failed=False)  # an outage is not counted
    assert (await g.claim("g")).failed == 1


async def test_the_decision_is_committed_once_with_its_effects_and_a_late_member_is_answered(redis, keys, stream):
    a, b = (gathering(redis, keys, stream, name) for name in "ab")
    ids = await entries(redis, stream, 5)
    for i in range(3):
        await join(a, keys, f"r{i}", ids[i])
    assert await a.claim("g") is not None
    assert await join(a, keys, "r3", ids[3]) is Joined.LATE  # claimed: the late Lua answers it
    decisions = {"decisions": f"{keys.namespace}:decisions"}
    assert await a.decide("g", keys=decisions, args={"verdict": "first"}, lists={"chosen": ["r0", "r2"]})
    assert not await b.decide("g", keys=decisions, args={"verdict": "second"}, lists={"chosen": ["r1"]})
    [(_, fields)] = await redis.xrange(decisions["decisions"])
    assert fields[b"verdict"] == b"first" and fields[b"chosen"] == b"r0,r2"
    assert sorted(fields[b"members"].split(b",")) == [b"r0", b"r1", b"r2"]
    assert await join(a, keys, "r4", ids[4]) is Joined.LATE
    assert await redis.smembers(late_key(keys)["late"]) == {b"r3", b"r4"}
    assert await pending(redis, stream) == 0  # the late Lua acked theirs
    stored = await redis.hgetall(a.key("g"))
    assert {f: v for f, v in stored.items() if f.startswith(b"m:")} == {b"m:r0": b"", b"m:r1": b"", b"m:r2": b""}
    assert await a.due(10) == [] and await a.claim("g") is None and await b.claim("g", complete=True) is None
    assert 0 < await redis.ttl(a.key("g")) <= 600


async def test_the_claimant_gives_up_after_max_failures_and_an_outage_is_no_failure(redis, keys, stream):
    g = gathering(redis, keys, stream)
    [entry] = await entries(redis, stream, 1)
    await join(g, keys, "r0", entry, size=1)
    errors = iter([redis_errors.ConnectionError("Redis went away"), ValueError("bad answer"), ValueError("again")])
    given_up: list[bool] = []
    told: list[str] = []

    async def decide(claim: Claim, give_up: bool) -> None:
        given_up.append(give_up)
        if not give_up:
            raise next(errors)
        decisions = {"decisions": f"{keys.namespace}:decisions"}
        assert await g.decide("g", keys=decisions, args={"verdict": "v"}, lists={"chosen": []})

    async def failed(name: str, error: Exception) -> None:
        told.append(f"{name}: {error}")

    claimant = Claimant(g, decide, Retries(0, max_failures=2), Outages("test"), describe=str, failed=failed)
    for _ in range(5):  # due again at once (retry_after_s 0): an outage, two failures, then given up and decided
        await claimant.attempt("g")
    assert given_up == [False, False, False, True]
    assert told == ["g: Redis went away", "g: bad answer", "g: again"]
    assert await g.due(10) == [] and int(await redis.hget(g.key("g"), "~failed")) == 2


async def test_the_claimant_gives_up_once_max_redeliveries_claimants_died_holding_it(redis, keys, stream, eventually):
    g = gathering(redis, keys, stream, lease_s=0.2)
    [entry] = await entries(redis, stream, 1)
    await join(g, keys, "r0", entry, size=1)
    given_up: list[bool] = []

    async def decide(claim: Claim, give_up: bool) -> None:
        given_up.append(give_up)

    claimant = Claimant(g, decide, Retries(0, max_failures=1, max_redeliveries=2), Outages("test"), describe=str)
    for _ in range(2):  # a claimant that dies holding its claim: neither decided nor released, it lapses
        assert await eventually(lambda: g.claim("g"), "the claim to be due", every=0.05)
    await eventually(lambda: g.due(10), "the second claim to lapse", every=0.05)
    await claimant.attempt("g")
    assert given_up == [True]
