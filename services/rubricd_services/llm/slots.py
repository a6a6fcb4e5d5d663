"""An LLM endpoint's concurrency, shared by every process of a deployment, with the judge's share kept free.

A model server serves a fixed number of requests at once (llama-server's
`--parallel`, a vLLM replica's batch); the rest wait in its queue behind
whatever came first, so a judge call would wait behind long analysis calls. With
`shared_slots` set for an endpoint, every call to it, from any process, first
takes one of that many leases in Redis (a sorted set of lease ids scored by
expiry, so a dead process's leases lapse), and an agent may take one only while
fewer than `max_share` of them are held. The judge (share 1) thus always finds
the slots the background agents (share 0.5 by default) may not take: it never
queues behind them. The cost: background work runs on at most that share of the
endpoint, even when no judge call is waiting.
"""

import asyncio
import contextlib
import math
import uuid
from collections.abc import AsyncIterator

from redis.asyncio import Redis

# KEYS: the endpoint's leases. ARGV: most leases held for this call to take one, lease id, lease ms.
# Times are Redis's own (TIME), so processes on hosts with skewed clocks agree.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
_FIRST_WAIT_S, _LONGEST_WAIT_S = 0.005, 0.1


class SharedSlots:
    """One endpoint's `slots` leases in Redis."""

    def __init__(self, redis: Redis, key: str, slots: int) -> None:
        self.redis, self.key, self.slots = redis, key, slots
        self._take = redis.register_script(_TAKE)

    @contextlib.asynccontextmanager
    async def hold(self, share: float, lease_s: float) -> AsyncIterator[None]:
        """Hold a lease for the body, once fewer than `share` of the slots are held; it lapses after `lease_s`
        if its holder dies."""
        limit, lease = max(1, math.floor(self.slots * share)), uuid.uuid4().hex
        wait = _FIRST_WAIT_S
        while not await self._take(keys=[self.key], args=[limit, lease, math.ceil(lease_s * 1000)]):
            await asyncio.sleep(wait)
            wait = min(wait * 2, _LONGEST_WAIT_S)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # Redis down: the lease lapses on its own
                await self.redis.zrem(self.key, lease)
