"""Announcing an analysis, and acking its scored rollout, as one atomic step.

The analysis is in memory before this runs (idempotent: its object id is
derived from the rollout), so a crash in between only redoes the memory write.
The step's set of analyzed rollout ids makes the announcement once-only: an
entry analyzed twice (reclaimed while still in flight, or re-scored) is acked
but not announced again. A rollout whose analysis is given up on (its entry
dead-lettered) goes into the step's given-up set, which the summarizer reads.
"""

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event, RolloutAnalysis

# KEYS: step analyses, analyses, events, scored. ARGV: rollout id, analysis, event, maxlen, group, entry id
_ANNOUNCE = """
local first = redis.call('SADD', KEYS[1], ARGV[1])
if first == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', '__data__', ARGV[2])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', '__data__', ARGV[3])
end
redis.call('XACK', KEYS[4], ARGV[5], ARGV[6])
return first
"""


GIVEN_UP_TTL_S = 7 * 86_400  # as long as the summarizer keeps a step's state


class Effects:
    def __init__(self, redis: Redis, keys: Keys, group: str, *, maxlen: int) -> None:
        self.redis = redis
        self.keys = keys
        self.group = group
        self.maxlen = maxlen
        self._announce = redis.register_script(_ANNOUNCE)

    async def announce(self, entry_id: bytes, analysis: RolloutAnalysis, event: Event) -> bool:
        """Publish the analysis (unless announced before), log it and ack its entry; True if this call announced it."""
        first = await self._announce(
            keys=[
                self.keys.step_analyses(analysis.run_id, analysis.step),
                self.keys.analyses,
                self.keys.events,
                self.keys.scored,
            ],
            args=[analysis.rollout_id, wire.encode(analysis), wire.encode(event), self.maxlen, self.group, entry_id],
        )
        return bool(first)

    async def given_up(self, run_id: str, step: int, rollout_id: str) -> None:
        """Record that this rollout's analysis will not come, so the summarizer does not wait for it."""
        key = self.keys.step_given_up(run_id, step)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(key, rollout_id)
            pipe.expire(key, GIVEN_UP_TTL_S)
            await pipe.execute()
