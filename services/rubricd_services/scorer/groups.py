"""Gathering a sample group in Redis for group judging, so that members read by different scorers are judged once.

A member joins its group's hash (`join`), and its rollouts entry is acked in the same script: from then on the
hash holds it, whichever process dies. The group is due at its deadline (`group_deadline_s` after its first
member), or at once when its `group_size` members are in; the process that `claim`s a due group (the one whose
member completed it, or any scorer's sweep) judges the members it took, and `finish`es it. A claim is a lease,
renewed while its process judges (`held`), as the entries in hand are kept from going idle: if the process dies,
the group falls due again when the lease runs out and another scorer claims it, judging only the members still
without a score. A member that arrives once a claim was made is judged alone.
The details: docs/researchers/groups.md, "Group judging"; docs/operators/recover.md, "Delivery".
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Rollout

log = logging.getLogger("rubricd.scorer")

# Every script reads the time from Redis, so the scorers' deadlines and leases keep one clock whatever their hosts'.
_NOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
"""

# KEYS: group, due, rollouts. ARGV: rollout id, the rollout, group size (0: unknown), deadline_s, consumer group,
# entry id, ttl. Returns the members in, or -1: the group's judging started, the member is judged alone.
_JOIN = (
    _NOW
    + """
if redis.call('HEXISTS', KEYS[1], '~claimed') == 1 then return -1 end
local n = tonumber(redis.call('HGET', KEYS[1], '~n') or '0')
if redis.call('HSETNX', KEYS[1], 'm:' .. ARGV[1], ARGV[2]) == 1 then
  n = redis.call('HINCRBY', KEYS[1], '~n', 1)
end
redis.call('HSETNX', KEYS[1], '~opened', now)
redis.call('EXPIRE', KEYS[1], ARGV[7])
local size = tonumber(ARGV[3])
if size > 0 and n >= size then
  redis.call('ZADD', KEYS[2], now, KEYS[1])
else
  redis.call('ZADD', KEYS[2], 'NX', now + tonumber(ARGV[4]), KEYS[1])
end
redis.call('XACK', KEYS[3], ARGV[5], ARGV[6])
return n
"""
)

# KEYS: group, due. ARGV: lease_s, consumer (kept as `~claimer`). Returns nil (not due, or claimed by another) or
# {claims, rollout, ...}.
_CLAIM = (
    _NOW
    + """
local at = redis.call('ZSCORE', KEYS[2], KEYS[1])
if not at or tonumber(at) > now then return nil end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], KEYS[1])
  return nil
end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), KEYS[1])
redis.call('HSETNX', KEYS[1], '~claimed', now)
redis.call('HSET', KEYS[1], '~claimer', ARGV[2])
local claims = redis.call('HINCRBY', KEYS[1], '~claims', 1)
local taken = {claims}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 2) == 'm:' then
    taken[#taken + 1] = fields[i + 1]
  end
end
return taken
"""
)

# KEYS: group, due. ARGV: lease_s, consumer. The claim is renewed if the consumer still holds it.
_KEEP = (
    _NOW
    + """
if redis.call('HGET', KEYS[1], '~claimer') == ARGV[2] then
  redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[1]), KEYS[1])
end
"""
)

# KEYS: group, due. The members' rollouts are dropped; the hash stays (with `~claimed`) until it expires.
_FINISH = """
redis.call('ZREM', KEYS[2], KEYS[1])
local fields = redis.call('HKEYS', KEYS[1])
for i = 1, #fields do
  if string.sub(fields[i], 1, 2) == 'm:' then redis.call('HDEL', KEYS[1], fields[i]) end
end
"""


@dataclass(frozen=True)
class Claimed:
    """A group claimed for judging: its key, its members, and how many claims it has had (this one included)."""

    key: str
    members: list[Rollout]
    claims: int


class Gathering:
    """The groups gathering in one namespace; `deadline_s` from a group's first member, `lease_s` per claim."""

    def __init__(
        self, redis: Redis, keys: Keys, group: str, consumer: str, *, deadline_s: float, lease_s: float, ttl_s: int
    ) -> None:
        self.redis, self.keys, self.group, self.consumer = redis, keys, group, consumer
        self.deadline_s, self.lease_s, self.ttl_s = deadline_s, lease_s, ttl_s
        self._join = redis.register_script(_JOIN)
        self._claim = redis.register_script(_CLAIM)
        self._finish = redis.register_script(_FINISH)
        self._keep = redis.register_script(_KEEP)

    def key(self, rollout: Rollout) -> str:
        assert rollout.group is not None
        return self.keys.group(rollout.run_id, rollout.step, rollout.group)

    async def join(self, rollout: Rollout, entry_id: bytes) -> int | None:
        """Add `rollout` to its group and ack its entry; the members in, or None if the group's judging started
        (judge it alone)."""
        n = await self._join(
            keys=[self.key(rollout), self.keys.groups_due, self.keys.rollouts],
            args=[
                rollout.rollout_id,
                wire.encode(rollout),
                rollout.group_size or 0,
                self.deadline_s,
                self.group,
                entry_id,
                self.ttl_s,
            ],
        )
        return None if int(n) < 0 else int(n)

    async def due(self, limit: int) -> list[str]:
        """The keys of the groups due now (claimed by no one, or their claim ran out), oldest first."""
        seconds, micros = await self.redis.time()
        now = seconds + micros / 1_000_000
        found = cast(list[bytes], await self.redis.zrangebyscore(self.keys.groups_due, "-inf", now, start=0, num=limit))
        return [k.decode() for k in found]

    async def claim(self, key: str) -> Claimed | None:
        """The group at `key` with its members, claimed for `lease_s`; None if it is not due (or is gone)."""
        taken = await self._claim(keys=[key, self.keys.groups_due], args=[self.lease_s, self.consumer])
        if not taken:
            return None
        members = sorted((wire.decode(body, Rollout) for body in taken[1:]), key=lambda r: r.rollout_id)
        return Claimed(key, members, int(taken[0]))

    @contextlib.asynccontextmanager
    async def held(self, key: str) -> AsyncIterator[None]:
        """While the body judges the group claimed at `key`, its lease is renewed every quarter of it."""

        async def keep() -> None:
            while True:
                await asyncio.sleep(self.lease_s / 4)
                try:
                    await self._keep(keys=[key, self.keys.groups_due], args=[self.lease_s, self.consumer])
                except Exception as e:  # missed renewals let the lease run out: another scorer judges it too
                    log.warning("could not renew the claim on group %s: %r", key, e)

        task = asyncio.create_task(keep())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def finish(self, key: str) -> None:
        """The group is judged: no longer due, its rollouts dropped."""
        await self._finish(keys=[key, self.keys.groups_due])
