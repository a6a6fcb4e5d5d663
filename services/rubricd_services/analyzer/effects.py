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
from rubricd_services.common.commit import Script

_ANNOUNCE = Script(
    keys="step_analyses analyses events scored",
    args="rollout_id analysis event maxlen group entry_id",
    body="""
local first = redis.call('SADD', k_step_analyses, a_rollout_id)
if first == 1 then
  append(k_analyses, a_maxlen, a_analysis)
  append(k_events, a_maxlen, a_event)
end
ack(k_scored, a_group, a_entry_id)
return first
""",
)


GIVEN_UP_TTL_S = 7 * 86_400  # as long as the summarizer keeps a step's state


class Effects:
    def __init__(self, redis: Redis, keys: Keys, group: str, *, maxlen: int) -> None:
        self.redis = redis
        self.keys = keys
        self.group = group
        self.maxlen = maxlen
        self._announce = _ANNOUNCE.register(redis)

    async def announce(self, entry_id: bytes, analysis: RolloutAnalysis, event: Event) -> bool:
        """Publish the analysis (unless announced before), log it and ack its entry; True if this call announced it."""
        first = await self._announce(
            keys={
                "step_analyses": self.keys.step_analyses(analysis.run_id, analysis.step),
                "analyses": self.keys.analyses,
                "events": self.keys.events,
                "scored": self.keys.scored,
            },
            args={
                "rollout_id": analysis.rollout_id,
                "analysis": wire.encode(analysis),
                "event": wire.encode(event),
                "maxlen": self.maxlen,
                "group": self.group,
                "entry_id": entry_id,
            },
        )
        return bool(first)

    async def given_up(self, run_id: str, step: int, rollout_id: str) -> None:
        """Record that this rollout's analysis will not come, so the summarizer does not wait for it."""
        key = self.keys.step_given_up(run_id, step)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(key, rollout_id)
            pipe.expire(key, GIVEN_UP_TTL_S)
            await pipe.execute()
