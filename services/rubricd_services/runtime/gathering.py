"""Members gather in Redis and one claimant decides: the scorer's sample groups, the analyzers' `extremes` samples
and the summarizer's steps.

A gathering is a hash (`m:<member id>` -> the member's value, and its own `~` fields) whose name waits in a sorted
set of the undecided, scored by when it may next be claimed: its deadline, at once when complete, the end of a
claim's lease, or when a failed decision is retried. `join` adds a member and acks its stream entry in the same
script; a member that arrives once the gathering was claimed is late, and answered by the user's `late` Lua.
`claim` hands a due gathering and its members to one claimant under a lease, renewed while it works (`held`): a
claimant that dies lets it lapse, and the next claim takes the gathering. `decide` commits the decision once,
atomically with the user's `decision` Lua (its effects), and drops the members' values; `release` leaves a
failed decision for later. A user supplies only its Lua, named as `commit.Script` names it.
`Claimant` is the one claimant loop over it: a task per gathering, the claim, the lease, the release and one
failure policy (the streams': an outage is no failure, a decision that failed `max_failures` times or whose
claimants died `max_redeliveries` times is given up); a service supplies only its decision.
How each service uses it: docs/development.md, "Gatherings".
"""

import asyncio
import contextlib
import enum
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from rubricd_services.runtime.commit import Names, Script, Value
from rubricd_services.runtime.locks import renewed
from rubricd_services.runtime.outage import Outages

log = logging.getLogger("rubricd.gathering")

# Every script reads the time from Redis, so the deadlines and leases of processes on different hosts keep one
# clock whatever their hosts' clocks say.
CLOCK = """\
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
"""

_MEMBERS = """\
local function members(gathering)
  local ids = {}
  for _, field in ipairs(redis.call('HKEYS', gathering)) do
    if string.sub(field, 1, 2) == 'm:' then ids[#ids + 1] = string.sub(field, 3) end
  end
  return ids
end
"""

_JOIN = """
if redis.call('HEXISTS', k_gathering, '~claimed') == 1 then
{late}
  return -1
end
local n = tonumber(redis.call('HGET', k_gathering, '~n') or '0')
if redis.call('HSETNX', k_gathering, 'm:' .. a_member, a_value) == 1 then
  n = redis.call('HINCRBY', k_gathering, '~n', 1)
end
redis.call('HSETNX', k_gathering, '~opened', now)
redis.call('EXPIRE', k_gathering, a_ttl)
ack(k_stream, a_consumer_group, a_entry_id)
if a_size ~= '' and n >= tonumber(a_size) then
  redis.call('ZADD', k_due, now, a_gathering)
  return 1
end
redis.call('ZADD', k_due, 'NX', now + tonumber(a_deadline_s), a_gathering)
return 0
"""

# Due: its time has come, or (`complete`, as its claimant found it) it was never claimed. Returns false, or
# {claims (this one included), failed decisions, releases, member id, value, ...}.
_CLAIM = """
local due = redis.call('ZSCORE', k_due, a_gathering)
if not due then return false end
local claimed = redis.call('HEXISTS', k_gathering, '~claimed') == 1
if tonumber(due) > now and (claimed or a_complete ~= '1') then return false end
if redis.call('EXISTS', k_gathering) == 0 then
  redis.call('ZREM', k_due, a_gathering)
  return false
end
redis.call('ZADD', k_due, now + tonumber(a_lease_s), a_gathering)
redis.call('HSETNX', k_gathering, '~claimed', now)
redis.call('HSET', k_gathering, '~claimer', a_claimant)
local taken = {redis.call('HINCRBY', k_gathering, '~claims', 1)}
for _, count in ipairs({'~failed', '~released'}) do
  taken[#taken + 1] = tonumber(redis.call('HGET', k_gathering, count) or '0')
end
local fields = redis.call('HGETALL', k_gathering)
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 2) == 'm:' then
    taken[#taken + 1] = string.sub(fields[i], 3)
    taken[#taken + 1] = fields[i + 1]
  end
end
return taken
"""

# 0: the claim is another's now (ours lapsed); a gathering decided has nothing left to renew.
_RENEW = """
if redis.call('HGET', k_gathering, '~claimer') ~= a_claimant then return 0 end
redis.call('ZADD', k_due, 'XX', now + tonumber(a_lease_s), a_gathering)
return 1
"""

_RELEASE = """
if redis.call('HGET', k_gathering, '~claimer') ~= a_claimant then return 0 end
redis.call('ZADD', k_due, 'XX', now + tonumber(a_after_s), a_gathering)
redis.call('HINCRBY', k_gathering, '~released', 1)
if a_failed == '1' then redis.call('HINCRBY', k_gathering, '~failed', 1) end
return 1
"""

# Once: the gathering leaves the undecided with its decision.
_DECIDE = """
if redis.call('ZREM', k_due, a_gathering) == 0 then return 0 end
{decision}
for _, id in ipairs(members(k_gathering)) do redis.call('HSET', k_gathering, 'm:' .. id, '') end
redis.call('EXPIRE', k_gathering, a_ttl)
return 1
"""


@dataclass(frozen=True)
class Lua:
    """A user's Lua in one of the gathering's scripts, and the keys, arguments and lists it names beside the
    gathering's own: the keys `gathering` (its hash) and `due`, the arguments `gathering` (its name) and `ttl`, the
    local `now` (Redis's time) and the function `members(k_gathering)` (their ids); in `join`'s `late` also the
    key `stream`, the arguments `member`, `consumer_group` and `entry_id` (to ack the entry: `ack` is the late's to
    call)."""

    body: str = ""
    keys: Names = ()
    args: Names = ()
    lists: Names = ()


class Joined(enum.IntEnum):
    """What a member's `join` did."""

    LATE = -1  # the gathering was claimed: the member is the user's `late` to answer
    IN = 0
    COMPLETE = 1  # the member completed the gathering: it is due at once


@dataclass(frozen=True)
class Claim:
    """A gathering claimed: its name, its members (id -> value), how many claims it had (this one included), how
    many of its decisions were released as failed, and how many released at all."""

    name: str
    members: dict[str, bytes]
    claims: int
    failed: int
    released: int = 0

    @property
    def lapsed(self) -> int:
        """The claims before this one that neither decided nor were released: their claimants died holding them."""
        return self.claims - 1 - self.released


def _names(names: Names) -> tuple[str, ...]:
    return tuple(names.split()) if isinstance(names, str) else tuple(names)


def _script(body: str, keys: Names, args: Names, lua: Lua | None = None) -> Script:
    """One of the gathering's scripts: the clock, `members`, then `body`; its names, then the user's `lua`'s."""
    lua = lua or Lua()
    return Script(
        CLOCK + _MEMBERS + body,
        keys=_names(keys) + _names(lua.keys),
        args=_names(args) + _names(lua.args),
        lists=lua.lists,
    )


class Gathering:
    """The gatherings of one kind: their names wait in the sorted set `due`; `key` maps a name to its hash
    (default: the name is the key). `claimant` names this process in its claims; `deadline_s` runs from a
    gathering's first member, `lease_s` is a claim's, `ttl_s` a hash's after its last change. A member's entry
    is acked on `stream` for the consumer group `consumer_group`."""

    def __init__(
        self,
        redis: Redis,
        due: str,
        claimant: str,
        *,
        lease_s: float,
        ttl_s: int,
        deadline_s: float = 0.0,
        key: Callable[[str], str] = str,
        stream: str = "",
        consumer_group: str = "",
        late: Lua | None = None,
        decision: Lua | None = None,
    ) -> None:
        self.redis, self.due_key, self.claimant, self.key = redis, due, claimant, key
        self.lease_s, self.ttl_s, self.deadline_s = lease_s, ttl_s, deadline_s
        self.stream, self.consumer_group = stream, consumer_group
        late_lua = late or Lua()
        base = ("gathering", "due")
        self._join = _script(
            _JOIN.format(late=late_lua.body.strip("\n")),
            (*base, "stream"),
            "gathering ttl member value size deadline_s consumer_group entry_id",
            late_lua,
        ).register(redis)
        self._claim = _script(_CLAIM, base, "gathering claimant lease_s complete").register(redis)
        self._renew = _script(_RENEW, base, "gathering claimant lease_s").register(redis)
        self._release = _script(_RELEASE, base, "gathering claimant after_s failed").register(redis)
        decision = decision or Lua()
        self._decide = _script(
            _DECIDE.format(decision=decision.body.strip("\n")), base, "gathering ttl", decision
        ).register(redis)

    def _keys(self, name: str, more: Mapping[str, str] | None) -> dict[str, str]:
        return {"gathering": self.key(name), "due": self.due_key, **(more or {})}

    async def join(
        self,
        name: str,
        member: str,
        value: bytes,
        *,
        size: int | None,
        entry_id: bytes,
        keys: Mapping[str, str] | None = None,
        args: Mapping[str, Value] | None = None,
    ) -> Joined:
        """Add `member` to the gathering `name` (of `size` members, None: unknown) and ack its entry; `keys` and
        `args` are the `late` Lua's."""
        joined = await self._join(
            keys={**self._keys(name, keys), "stream": self.stream},
            args={
                "gathering": name,
                "ttl": self.ttl_s,
                "member": member,
                "value": value,
                "size": "" if size is None else size,
                "deadline_s": self.deadline_s,
                "consumer_group": self.consumer_group,
                "entry_id": entry_id,
                **(args or {}),
            },
        )
        return Joined(int(joined))

    async def due(self, limit: int) -> list[str]:
        """The names of the gatherings due now (at their deadline, complete, or their claim lapsed), oldest first."""
        seconds, micros = await self.redis.time()
        found = await self.redis.zrangebyscore(self.due_key, "-inf", seconds + micros / 1_000_000, start=0, num=limit)
        return [name.decode() for name in cast(list[bytes], found)]

    async def claim(self, name: str, *, complete: bool = False) -> Claim | None:
        """The gathering `name` with its members, ours for `lease_s`; None if it is not due (or decided, or gone).
        `complete`: the claimant found it complete, so it is due before its deadline unless claimed before."""
        args: dict[str, Value] = {
            "gathering": name,
            "claimant": self.claimant,
            "lease_s": self.lease_s,
            "complete": int(complete),
        }
        taken = await self._claim(keys=self._keys(name, None), args=args)
        if not taken:
            return None
        pairs = taken[3:]
        members = {pairs[i].decode(): pairs[i + 1] for i in range(0, len(pairs), 2)}
        return Claim(name, members, int(taken[0]), int(taken[1]), int(taken[2]))

    @contextlib.asynccontextmanager
    async def held(self, name: str) -> AsyncIterator[None]:
        """While the block works on the gathering `name`, our claim on it is renewed every third of `lease_s`."""

        async def renew() -> bool:
            args: dict[str, Value] = {"gathering": name, "claimant": self.claimant, "lease_s": self.lease_s}
            return bool(await self._renew(keys=self._keys(name, None), args=args))

        async with renewed(renew, self.lease_s / 3, f"the claim on {name}"):
            yield

    async def release(self, name: str, after_s: float, *, failed: bool) -> None:
        """A decision that did not finish: our claim is due again `after_s` from now; `failed` counts it against
        the gathering (an outage does not)."""
        args: dict[str, Value] = {
            "gathering": name,
            "claimant": self.claimant,
            "after_s": after_s,
            "failed": int(failed),
        }
        await self._release(keys=self._keys(name, None), args=args)

    async def decide(
        self,
        name: str,
        *,
        keys: Mapping[str, str] | None = None,
        args: Mapping[str, Value] | None = None,
        lists: Mapping[str, Sequence[Value]] | None = None,
    ) -> bool:
        """Commit the decision on `name` with its effects (the `decision` Lua's `keys`, `args` and `lists`) and
        drop its members' values, unless it was decided before; True if this call decided it."""
        decided = await self._decide(
            keys=self._keys(name, keys), args={"gathering": name, "ttl": self.ttl_s, **(args or {})}, lists=lists
        )
        return bool(decided)


Decide = Callable[[Claim, bool], Awaitable[None]]  # a claimed gathering's decision; True: it is given up on


@dataclass(frozen=True)
class Retries:
    """When a gathering is given up on (the streams' rule): after `max_failures` decisions failed for a reason of
    their own, or `max_redeliveries` claimants died holding it (None: never); a failed decision is due again
    `retry_after_s` later."""

    retry_after_s: float
    max_failures: int | None = None
    max_redeliveries: int | None = None

    def gives_up(self, claim: Claim) -> bool:
        return (self.max_failures is not None and claim.failed >= self.max_failures) or (
            self.max_redeliveries is not None and claim.lapsed >= self.max_redeliveries
        )


class Claimant:
    """This process's claims on one kind of gathering: each is tried in a task of its own (one per name, `later`)
    or in the caller's (`attempt`), claimed, held while `decide` works on it, and released when it raises, counted
    as failed unless `outages` says an outage caused it (a decision that ends well says the dependencies it `uses`
    answered). `describe` names a gathering in the logs; `complete`
    (default: never) reads whether a gathering is complete before its deadline, None if it needs no decision;
    `failed` is told of each failed decision."""

    def __init__(
        self,
        gathering: Gathering,
        decide: Decide,
        retries: Retries,
        outages: Outages,
        *,
        describe: Callable[[str], str],
        uses: Sequence[str] = (),
        complete: Callable[[str], Awaitable[bool | None]] | None = None,
        failed: Callable[[str, Exception], Awaitable[None]] | None = None,
    ) -> None:
        self.gathering, self.decide, self.retries, self.outages = gathering, decide, retries, outages
        self.describe, self.uses, self.complete, self.failed = describe, tuple(uses), complete, failed
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def later(self, name: str) -> None:
        """Try the gathering `name` in the background, unless this process tries it already."""
        if name not in self._tasks:
            task = asyncio.create_task(self.attempt(name))
            self._tasks[name] = task
            task.add_done_callback(lambda _: self._tasks.pop(name, None))

    async def sweep(self, names: Iterable[str] | None = None, *, limit: int = 100) -> None:
        """Try `names` (default: up to `limit` gatherings due now) in the background."""
        for name in await self.gathering.due(limit) if names is None else names:
            self.later(name)

    async def stop(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()

    async def attempt(self, name: str) -> None:
        """Claim the gathering `name` if it is due, and decide it under the claim; a failure is released."""
        doing = self.describe(name)
        try:
            complete = await self.complete(name) if self.complete else False
            if complete is None or (claim := await self.gathering.claim(name, complete=complete)) is None:
                return
            give_up = self.retries.gives_up(claim)
            if give_up:
                log.warning("giving up on %s after %d failures and %d lost claims", doing, claim.failed, claim.lapsed)
            async with self.gathering.held(name):
                await self.decide(claim, give_up)
            if self.uses:
                self.outages.up(*self.uses)
        except Exception as e:
            outage = self.outages.down(doing, e)
            if not outage:
                log.exception("%s failed", doing)
            with contextlib.suppress(Exception):
                await self.gathering.release(name, self.retries.retry_after_s, failed=not outage)
                if self.failed:
                    await self.failed(name, e)
