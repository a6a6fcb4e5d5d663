"""Announcing an analysis, and acking its scored rollout, as one atomic step.

The analysis is in memory before this runs (idempotent: its object id is
derived from the rollout), so a crash in between only redoes the memory write.
The step's set of analyzed rollout ids makes the announcement once-only: an
entry analyzed twice (reclaimed while still in flight, or re-scored) is acked
but not announced again. A rollout whose analysis is given up on (its entry
dead-lettered) goes into the step's given-up set, which the summarizer reads.

The analysis sample (`sampling`) keeps its groups here too. Under k per group, `pick` picks the first k
members to arrive; one not picked is recorded as left out (the step's unsampled hash, which the summarizer
reads) and acked at once. Under `extremes`, `gather` adds each member (its reward and its ScoredRollout) to
its group's hash and acks its entry: from then on the group, not the entry, holds it. The group waits in the
sorted set of undecided groups until it is complete (due at once) or its deadline passes; `claim` gives it to
one analyzer for a while (a claim that lapses, its holder dead, gives it to the next), and `decide` announces
the chosen analyses, records every other member as left out and marks the group decided, once. A member that
arrives after its group was decided is left out.
"""

import json
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event, Rollout, RolloutAnalysis, ScoredRollout
from rubricd_services.common.commit import Script

from .sampling import EXTREMES

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


# k per group: the first k members of a group to arrive are picked; the others are left out (and acked).
_PICK = Script(
    keys="group step_unsampled scored",
    args="rollout_id k rule ttl consumers entry_id",
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
ack(k_scored, a_consumers, a_entry_id)
return 0
""",
)

# extremes: the member joins its group (due at once when that completes it, unless someone is deciding the group
# now) and its entry is acked; a member of a group already decided is left out.
_GATHER = Script(
    keys="group groups step_unsampled scored",
    args="rollout_id reward body size member now deadline rule ttl consumers entry_id",
    body="""
local complete = 0
if redis.call('HEXISTS', k_group, 'decided') == 1 then
  if redis.call('HEXISTS', k_group, 'r:' .. a_rollout_id) == 0 then
    redis.call('HSET', k_step_unsampled, a_rollout_id, a_rule)
    redis.call('EXPIRE', k_step_unsampled, a_ttl)
  end
elseif redis.call('HSETNX', k_group, 'r:' .. a_rollout_id, a_reward) == 1 then
  redis.call('HSET', k_group, 'b:' .. a_rollout_id, a_body)
  local n = redis.call('HINCRBY', k_group, 'n', 1)
  local claimed = tonumber(redis.call('HGET', k_group, 'claim_until') or '0') > tonumber(a_now)
  if a_size ~= '' and n >= tonumber(a_size) and not claimed then
    redis.call('ZADD', k_groups, a_now, a_member)
    complete = 1
  else
    redis.call('ZADD', k_groups, 'NX', a_deadline, a_member)
  end
end
redis.call('EXPIRE', k_group, a_ttl)
ack(k_scored, a_consumers, a_entry_id)
return complete
""",
)

# A due group is ours until `until`; 0 if it is not due, someone else holds it, or it is decided or gone.
_CLAIM = Script(
    keys="group groups",
    args="member now until",
    body="""
local due = redis.call('ZSCORE', k_groups, a_member)
if not due or tonumber(due) > tonumber(a_now) then return 0 end
if redis.call('HEXISTS', k_group, 'n') == 0 or redis.call('HEXISTS', k_group, 'decided') == 1 then
  redis.call('ZREM', k_groups, a_member)
  return 0
end
redis.call('ZADD', k_groups, a_until, a_member)
redis.call('HSET', k_group, 'claim_until', a_until)
return 1
""",
)

# The chosen analyses announced (each once), every other member left out, the chosen given up on recorded, the
# ScoredRollouts dropped; once: 0 if the group was decided before.
_DECIDE = Script(
    keys="group groups step_analyses step_unsampled step_given_up analyses events",
    args="member rule maxlen ttl",
    lists="ids analyses events given_up",
    body="""
redis.call('ZREM', k_groups, a_member)
if redis.call('HEXISTS', k_group, 'decided') == 1 then return 0 end
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
for _, field in ipairs(redis.call('HKEYS', k_group)) do
  local kind, id = string.sub(field, 1, 2), string.sub(field, 3)
  if kind == 'r:' and not chosen[id] then
    redis.call('HSET', k_step_unsampled, id, a_rule)
    redis.call('EXPIRE', k_step_unsampled, a_ttl)
  elseif kind == 'b:' then
    redis.call('HDEL', k_group, field)
  end
end
redis.call('HSET', k_group, 'decided', '1')
redis.call('HDEL', k_group, 'claim_until')
redis.call('EXPIRE', k_group, a_ttl)
return 1
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
    def parse(cls, member: bytes | str) -> "GroupRef":
        run_id, step, group = json.loads(member)
        return cls(run_id, int(step), group)

    @property
    def member(self) -> str:
        """Its member in the sorted set of undecided groups."""
        return json.dumps([self.run_id, self.step, self.group])


@dataclass(frozen=True)
class Gathered:
    """A group's members as gathered: each rollout id's reward and ScoredRollout, and its decisions that failed."""

    rewards: dict[str, float | None]
    bodies: dict[str, bytes]
    failed: int


class Effects:
    def __init__(self, redis: Redis, keys: Keys, group: str, *, maxlen: int) -> None:
        self.redis = redis
        self.keys = keys
        self.group = group
        self.maxlen = maxlen
        self._announce = _ANNOUNCE.register(redis)
        self._pick = _PICK.register(redis)
        self._gather = _GATHER.register(redis)
        self._claim = _CLAIM.register(redis)
        self._decide = _DECIDE.register(redis)

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
                "consumers": self.group,
                "entry_id": entry_id,
            },
        )
        return bool(picked)

    async def gather(self, scored: ScoredRollout, body: bytes, entry_id: bytes, now: float, deadline_s: float) -> bool:
        """extremes: add the rollout to its group and ack its entry; True if it completed the group (decide it)."""
        rollout, group = scored.rollout, GroupRef.of(scored.rollout)
        complete = await self._gather(
            keys={
                "group": self._group_key(group),
                "groups": self.keys.analysis_groups,
                "step_unsampled": self.keys.step_unsampled(rollout.run_id, rollout.step),
                "scored": self.keys.scored,
            },
            args={
                "rollout_id": rollout.rollout_id,
                "reward": "" if scored.score.reward is None else repr(scored.score.reward),
                "body": body,
                "size": rollout.group_size or "",
                "member": group.member,
                "now": now,
                "deadline": now + deadline_s,
                "rule": EXTREMES,
                "ttl": GIVEN_UP_TTL_S,
                "consumers": self.group,
                "entry_id": entry_id,
            },
        )
        return bool(complete)

    async def due_groups(self, now: float, limit: int = 100) -> list[GroupRef]:
        """Undecided groups that are complete, past their deadline, or whose claim lapsed."""
        members = await self.redis.zrangebyscore(self.keys.analysis_groups, "-inf", now, start=0, num=limit)
        return [GroupRef.parse(m) for m in cast(list[bytes], members)]

    async def claim(self, group: GroupRef, now: float, until: float) -> bool:
        """Take a due group until `until`; False if it is not due, held, decided or gone."""
        keys = {"group": self._group_key(group), "groups": self.keys.analysis_groups}
        return bool(await self._claim(keys=keys, args={"member": group.member, "now": now, "until": until}))

    async def gathered(self, group: GroupRef) -> Gathered:
        raw = cast(dict[bytes, bytes], await self.redis.hgetall(self._group_key(group)))
        rewards: dict[str, float | None] = {}
        bodies: dict[str, bytes] = {}
        for field, value in raw.items():
            name = field.decode()
            if name.startswith("r:"):
                rewards[name[2:]] = float(value) if value else None
            elif name.startswith("b:"):
                bodies[name[2:]] = value
        return Gathered(rewards, bodies, int(raw.get(b"failed", 0)))

    async def decide(
        self, group: GroupRef, analyses: list[RolloutAnalysis], events: list[Event], given_up: list[str]
    ) -> bool:
        """Announce the chosen analyses, record the other members as left out; True if this call decided it."""
        run, step = group.run_id, group.step
        decided = await self._decide(
            keys={
                "group": self._group_key(group),
                "groups": self.keys.analysis_groups,
                "step_analyses": self.keys.step_analyses(run, step),
                "step_unsampled": self.keys.step_unsampled(run, step),
                "step_given_up": self.keys.step_given_up(run, step),
                "analyses": self.keys.analyses,
                "events": self.keys.events,
            },
            args={"member": group.member, "rule": EXTREMES, "maxlen": self.maxlen, "ttl": GIVEN_UP_TTL_S},
            lists={
                "ids": [a.rollout_id for a in analyses],
                "analyses": [wire.encode(a) for a in analyses],
                "events": [wire.encode(e) for e in events],
                "given_up": given_up,
            },
        )
        return bool(decided)

    async def retry(self, group: GroupRef, at: float, *, failed: bool) -> None:
        """A decision that did not finish: the group is due again at `at`; `failed` counts it against the group
        (an outage does not)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(self.keys.analysis_groups, {group.member: at}, xx=True)
            if failed:
                pipe.hincrby(self._group_key(group), "failed", 1)
            await pipe.execute()

    def _group_key(self, group: GroupRef) -> str:
        return self.keys.analysis_group(group.run_id, group.step, group.group)
