"""An LLM endpoint's rate limits, requests and tokens per minute, shared by every process of a deployment.

A provider limits requests per minute (`rpm`) and tokens per minute (`tpm`) per
key; N scorers and M analyzers together must stay under them. With `rpm` or
`tpm` set, every call to the endpoint, from any process, first books its start
in Redis (one hash per endpoint, times from Redis's own clock) and waits for it.
Calls are paced, not bunched: each request pushes the next start 60/rpm s on,
each token 60/tpm s, so no minute ever admits more than `rpm` requests, and no
minute more than `tpm` tokens beyond one call's (a generic cell rate algorithm
without burst). A call books an estimate of its tokens (prompt characters / 4,
and its `max_tokens`) and corrects it with what the reply says it used. A
provider's 429 with Retry-After pauses the endpoint for every process.
"""

import asyncio
import contextlib
import math

from redis.asyncio import Redis

# KEYS: the endpoint's hash (`requests`, `tokens`: when the next call may start by each limit; `paused`: no call
# starts before). ARGV: µs per request, µs per token (0: no such limit), the call's tokens. Returns µs to wait, and
# the start (µs).
_BOOK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fields = {'requests', 'tokens'}
local v = redis.call('HMGET', KEYS[1], 'requests', 'tokens', 'paused')
local takes = {tonumber(ARGV[1]), tonumber(ARGV[2]) * tonumber(ARGV[3])}
local start = math.max(now, tonumber(v[3]) or 0)
for i = 1, 2 do
  if takes[i] > 0 then start = math.max(start, tonumber(v[i]) or 0) end
end
local last = math.max(start, tonumber(v[1]) or 0, tonumber(v[2]) or 0)
for i = 1, 2 do
  if takes[i] > 0 then
    last = math.max(last, start + takes[i])
    redis.call('HSET', KEYS[1], fields[i], string.format('%.0f', start + takes[i]))
  end
end
redis.call('PEXPIRE', KEYS[1], math.ceil((last - now) / 1000) + 60000)
return {string.format('%.0f', start - now), string.format('%.0f', start)}
"""
# ARGV: µs to move the tokens' next start by (an estimate corrected: may be < 0), µs to pause for from now.
_ADJUST = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('HMGET', KEYS[1], 'requests', 'tokens', 'paused')
local tokens = (tonumber(v[2]) or now) + tonumber(ARGV[1])
local paused = math.max(tonumber(v[3]) or 0, now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'tokens', string.format('%.0f', tokens), 'paused', string.format('%.0f', paused))
local last = math.max(tonumber(v[1]) or 0, tokens, paused)
redis.call('PEXPIRE', KEYS[1], math.max(0, math.ceil((last - now) / 1000)) + 60000)
return 1
"""
_MINUTE_US = 60_000_000


class RateLimit:
    """One endpoint's request and token rates in Redis; the limits come with each call (they are an agent's
    settings), the bookings are the endpoint's."""

    def __init__(self, redis: Redis, key: str) -> None:
        self.redis, self.key = redis, key
        self._book = redis.register_script(_BOOK)
        self._adjust = redis.register_script(_ADJUST)

    async def book(self, rpm: int | None, tpm: int | None, tokens: int) -> tuple[float, int]:
        """Book the next start for a call of `tokens`: (seconds to wait for it, the start in Redis µs)."""
        per_request = _MINUTE_US / rpm if rpm else 0
        per_token = _MINUTE_US / tpm if tpm else 0
        wait, start = await self._book(keys=[self.key], args=[per_request, per_token, tokens])
        return int(wait) / 1_000_000, int(start)

    async def acquire(self, rpm: int | None, tpm: int | None, tokens: int) -> None:
        """Wait for this call's turn under the endpoint's limits."""
        wait_s, _ = await self.book(rpm, tpm, tokens)
        if wait_s > 0:
            await asyncio.sleep(wait_s)

    async def correct(self, tpm: int | None, tokens: int) -> None:
        """The call used `tokens` more than it booked (fewer: < 0); later calls start that much later (sooner)."""
        if tpm and tokens:
            await self._change(tokens * _MINUTE_US / tpm, 0)

    async def pause(self, seconds: float) -> None:
        """No call of any process starts within `seconds` (a provider's Retry-After)."""
        await self._change(0, math.ceil(seconds * 1_000_000))

    async def _change(self, tokens_us: float, pause_us: int) -> None:
        with contextlib.suppress(Exception):  # Redis down: the bookings lapse with the key
            await self._adjust(keys=[self.key], args=[tokens_us, pause_us])
