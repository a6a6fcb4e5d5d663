"""Announcing an analysis, and acking its scored rollout, as one atomic step.

The analysis is in memory before this runs (idempotent: its object id is
derived from the rollout), so a crash in between only redoes the memory write.
The step's set of analyzed rollout ids makes the announcement once-only: an
entry analyzed twice (reclaimed while still in flight, or re-scored) is acked
but not announced again. A rollout whose analysis is given up on (its entry
dead-lettered) goes into the step's given-up set, which the summarizer reads.

The analysis sample (`sampling`) keeps its groups here too. Under k per group, `pick` picks the first k
members to arrive; one not picked is recorded as left out (the step's unsampled hash, which the summarizer
reads) and acked at once. Under `extremes`, each group is a gathering (runtime.gathering, `samples`): `gather`
adds each member (its ScoredRollout) to its group's hash and acks its entry, so the group, not the entry, holds
it; the group is due when complete or at its deadline, one analyzer claims it (a claim that lapses, its holder
dead, gives it to the next), and `decide` announces the chosen analyses and records every other member as left
out, once. A member that arrives after its group was claimed is left out.
"""

import json
from dataclasses import dataclass

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import ANALYZERS, Keys
from rubricd.messages import Event, Rollout, RolloutAnalysis, ScoredRollout
from rubricd_services.runtime.commit import Script
from rubricd_services.runtime.gathering import Gathering, Joined, Lua

from .sampling import EXTREMES

_ANNOUNCE = Script(
    keys="step_analyses analyses events scored",
    args="rollout_id analysis event maxlen consumer_group entry_id",
    body="""
local first = redis.call('SADD', k_step_analyses, a_rollout_id)
if first == 1 then
  append(k_analyses, a_maxlen, a_analysis)
  append(k_events, a_maxlen, a_event)
end
ack(k_scored, a_consumer_group, a_entry_id)
return first
""",
)


# k per group: the first k members of a group to arrive are picked; the others are left out (and acked).
_PICK = Script(
    keys="group step_unsampled scored",
    args="rollout_id k rule ttl consumer_group entry_id",
    body="""
local field = 'p:' .. a_rollout_id
local picked = redis.call('HGET', k_group, field)
if not picked then
  picked = redis.call('HINCRBY', k_group, 'n', 1) <= tonumber(a_k) and '1' or '0'
  redis.call('HSET', k_group, field, picked)
end
redis.call('EXPIRE', k_group, a_ttl)
if picked == '1' then return 1 end
redis.call('HSET', k_step_unsampled, a_rollout_id, a_rule)
redis.call('EXPIRE', k_step_unsampled, a_ttl)
ack(k_scored, a_consumer_group, a_entry_id)
return 0
""",
)

# extremes, on the gathering: a member that arrives once its group was claimed is left out (unless it is one of
# the group's, redelivered), and its entry acked.
_LEFT_OUT = Lua(
    keys="step_unsampled",
    args="rule",
    body="""
if redis.call('HEXISTS', k_gathering, 'm:' .. a_member) == 0 then
  redis.call('HSET', k_step_unsampled, a_member, a_rule)
  redis.call('EXPIRE', k_step_unsampled, a_ttl)
end
ack(k_stream, a_consumer_group, a_entry_id)
""",
)

# The decision: the chosen analyses announced (each once), the chosen given up on recorded, every other member
# left out.
_DECIDED = Lua(
    keys="step_analyses step_unsampled step_given_up analyses events",
    args="rule maxlen",
    lists="ids analyses events given_up",
    body="""
local chosen = {}
for i, id in ipairs(l_ids) do
  chosen[id] = true
  if redis.call('SADD', k_step_analyses, id) == 1 then
    append(k_analyses, a_maxlen, l_analyses[i])
    append(k_events, a_maxlen, l_events[i])
  end
end
for _, id in ipairs(l_given_up) do
  chosen[id] = true
  redis.call('SADD', k_step_given_up, id)
  redis.call('EXPIRE', k_step_given_up, a_ttl)
end
for _, id in ipairs(members(k_gathering)) do
  if not chosen[id] then
    redis.call('HSET', k_step_unsampled, id, a_rule)
    redis.call('EXPIRE', k_step_unsampled, a_ttl)
  end
end
""",
)


GIVEN_UP_TTL_S = 7 * 86_400  # as long as the summarizer keeps a step's state; a group's and the unsampled too


@dataclass(frozen=True)
class GroupRef:
    """One sample group of a run's step."""

    run_id: str
    step: int
    group: str

    @classmethod
    def of(cls, rollout: Rollout) -> "GroupRef":
        assert rollout.group is not None
        return cls(rollout.run_id, rollout.step, rollout.group)

    @classmethod
    def parse(cls, name: str) -> "GroupRef":
        run_id, step, group = json.loads(name)
        return cls(run_id, int(step), group)

    @property
    def name(self) -> str:
        """Its name in the gathering: its member in the sorted set of undecided groups."""
        return json.dumps([self.run_id, self.step, self.group])


class Effects:
    def __init__(
        self, redis: Redis, keys: Keys, consumer: str, *, maxlen: int, deadline_s: float, lease_s: float
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.consumer_group = ANALYZERS
        self.maxlen = maxlen
        self._announce = _ANNOUNCE.register(redis)
        self._pick = _PICK.register(redis)
        self.samples = Gathering(
            redis,
            keys.analysis_groups,
            consumer,
            deadline_s=deadline_s,
            lease_s=lease_s,
            ttl_s=GIVEN_UP_TTL_S,
            key=lambda name: self._group_key(GroupRef.parse(name)),
            stream=keys.scored,
            consumer_group=ANALYZERS,
            late=_LEFT_OUT,
            decision=_DECIDED,
        )

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
                "consumer_group": self.consumer_group,
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

    async def pick(self, scored: ScoredRollout, k: int, entry_id: bytes) -> bool:
        """k per group: True if the rollout is among the first k of its group to arrive (analyze it); else it is
        recorded as left out and its entry acked."""
        rollout = scored.rollout
        picked = await self._pick(
            keys={
                "group": self._group_key(GroupRef.of(rollout)),
                "step_unsampled": self.keys.step_unsampled(rollout.run_id, rollout.step),
                "scored": self.keys.scored,
            },
            args={
                "rollout_id": rollout.rollout_id,
                "k": k,
                "rule": str(k),
                "ttl": GIVEN_UP_TTL_S,
                "consumer_group": self.consumer_group,
                "entry_id": entry_id,
            },
        )
        return bool(picked)

    async def gather(self, scored: ScoredRollout, body: bytes, entry_id: bytes) -> bool:
        """extremes: add the rollout to its group and ack its entry (left out if the group was claimed); True if it
        completed the group (decide it)."""
        rollout = scored.rollout
        joined = await self.samples.join(
            GroupRef.of(rollout).name,
            rollout.rollout_id,
            body,
            size=rollout.group_size,
            entry_id=entry_id,
            keys={"step_unsampled": self.keys.step_unsampled(rollout.run_id, rollout.step)},
            args={"rule": EXTREMES},
        )
        return joined is Joined.COMPLETE

    async def decide(
        self, group: GroupRef, analyses: list[RolloutAnalysis], events: list[Event], given_up: list[str]
    ) -> bool:
        """Announce the chosen analyses, record the other members as left out; True if this call decided it."""
        run, step = group.run_id, group.step
        return await self.samples.decide(
            group.name,
            keys={
                "step_analyses": self.keys.step_analyses(run, step),
                "step_unsampled": self.keys.step_unsampled(run, step),
                "step_given_up": self.keys.step_given_up(run, step),
                "analyses": self.keys.analyses,
                "events": self.keys.events,
            },
            args={"rule": EXTREMES, "maxlen": self.maxlen},
            lists={
                "ids": [a.rollout_id for a in analyses],
                "analyses": [wire.encode(a) for a in analyses],
                "events": [wire.encode(e) for e in events],
                "given_up": given_up,
            },
        )

    def _group_key(self, group: GroupRef) -> str:
        return self.keys.analysis_group(group.run_id, group.step, group.group)
