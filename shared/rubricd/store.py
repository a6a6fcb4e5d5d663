"""Rubric sets in Redis: versioned per run (and instance), written atomically.

One hash per run and instance: field `v<N>` holds version N, field `current`
holds a copy of the newest one, so reading the current set is one HGET, and
field `s<step>` the version made from that training step's evidence, so finding
it is one read however many versions the run has. A new version is written only
if it directly follows the current one (a Lua compare-and-set), so two writers
can never race on one rubric set. With promotion gated, a proposal is first a
candidate in the same hash (`candidate`, one at a time, on the current version,
so a scorer reads both at once), recorded in the set's candidates hash by the
step it was proposed at and, once decided, by the step it was decided at; the
decision and its version are written at once.
"""

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import msgspec
from redis.asyncio import Redis

from . import wire
from .keys import Keys
from .messages import Candidate, RubricSet

# KEYS: the rubric set, the runs index, the run's instance sets. ARGV: expected version, version, set, run, instance,
# the step it was made from ('' for none)
_PUBLISH = """
local cur = redis.call('HGET', KEYS[1], 'current')
local expected = tonumber(ARGV[1])
if cur then
  if cjson.decode(cur)['version'] ~= expected then return 0 end
elseif expected ~= 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'v' .. ARGV[2], ARGV[3], 'current', ARGV[3])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 's' .. ARGV[6], ARGV[2]) end
redis.call('ZADD', KEYS[2], redis.call('TIME')[1], ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[3], ARGV[5], ARGV[2]) end
return 1
"""

# KEYS: step marker, done steps, step log. ARGV: step
_ADVANCE = """
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[1])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', 100, '*', 'step', ARGV[1])
redis.call('EXPIRE', KEYS[3], 86400)
local cur = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) > cur then redis.call('SET', KEYS[1], ARGV[1]) end
return math.max(cur, tonumber(ARGV[1]))
"""

# KEYS: the rubric set, its candidates. ARGV: the version the candidate is based on, the candidate, its step
_PROPOSE = """
local cur = redis.call('HGET', KEYS[1], 'current')
if not cur or cjson.decode(cur)['version'] ~= tonumber(ARGV[1]) then return 0 end
if redis.call('HEXISTS', KEYS[1], 'candidate') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'candidate', ARGV[2])
redis.call('HSET', KEYS[2], 'p' .. ARGV[3], ARGV[2])
return 1
"""

# KEYS: the rubric set, the runs index, the run's instance sets, the candidate's shadow scores, the set's
# candidates. ARGV: the candidate's step, the decided candidate, the decision's step, the promoted set ('' for
# none), its version, run, instance
_DECIDE = """
local pending = redis.call('HGET', KEYS[1], 'candidate')
if not pending or cjson.decode(pending)['step'] ~= tonumber(ARGV[1]) then return 0 end
if ARGV[4] ~= '' then
  local cur = redis.call('HGET', KEYS[1], 'current')
  if not cur or cjson.decode(cur)['version'] ~= tonumber(ARGV[5]) - 1 then return 0 end
  redis.call('HSET', KEYS[1], 'v' .. ARGV[5], ARGV[4], 'current', ARGV[4], 's' .. ARGV[1], ARGV[5])
  redis.call('ZADD', KEYS[2], redis.call('TIME')[1], ARGV[6])
  if ARGV[7] ~= '' then redis.call('HSET', KEYS[3], ARGV[7], ARGV[5]) end
end
redis.call('HDEL', KEYS[1], 'candidate')
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[5], 'p' .. ARGV[1], ARGV[2], 'd' .. ARGV[3], ARGV[1])
return 1
"""

_decoder = msgspec.json.Decoder(RubricSet)
_candidate = msgspec.json.Decoder(Candidate)


@dataclass(frozen=True)
class Shadowing:
    """Where a run's (or instance's) candidate stands, seen from one step: the one `pending` (in shadow), the one
    `proposed` at the step, the one `decided` at it."""

    pending: Candidate | None
    proposed: Candidate | None
    decided: Candidate | None


class RubricStore:
    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._publish = redis.register_script(_PUBLISH)
        self._advance = redis.register_script(_ADVANCE)
        self._propose = redis.register_script(_PROPOSE)
        self._decide = redis.register_script(_DECIDE)

    async def current(self, run_id: str, instance_key: str | None = None) -> RubricSet | None:
        raw = await self.redis.hget(self.keys.rubric_set(run_id, instance_key), "current")
        return _decoder.decode(raw) if raw else None

    async def in_force(self, run_id: str, instance_key: str | None = None) -> tuple[RubricSet | None, Candidate | None]:
        """The current set and the candidate in shadow on it, if any (one HMGET)."""
        current, pending = await self.redis.hmget(self.keys.rubric_set(run_id, instance_key), ["current", "candidate"])
        found = _decoder.decode(current) if current else None
        candidate = _candidate.decode(pending) if pending else None
        if found is None or candidate is None or candidate.base_version != found.version:
            return found, None
        return found, candidate

    async def shadowing(self, run_id: str, instance_key: str | None, step: int) -> Shadowing:
        """The candidate in shadow, and those proposed and decided at `step` (one round trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.rubric_set(run_id, instance_key), "candidate")
            pipe.hmget(self.keys.candidates(run_id, instance_key), [f"p{step}", f"d{step}"])
            pending, (proposed, decided_from) = await pipe.execute()
        decided = None
        if decided_from is not None:
            decided = await self.redis.hget(self.keys.candidates(run_id, instance_key), f"p{int(decided_from)}")
        found = [_candidate.decode(raw) if raw else None for raw in (pending, proposed, decided)]
        return Shadowing(*found)

    async def candidates(self, run_id: str, instance_key: str | None = None) -> list[Candidate]:
        """Every candidate of a rubric set, with its decision once made, by the step it was proposed at."""
        fields = cast(dict[bytes, bytes], await self.redis.hgetall(self.keys.candidates(run_id, instance_key)))
        found = [_candidate.decode(v) for k, v in fields.items() if k.startswith(b"p")]
        return sorted(found, key=lambda c: c.step)

    async def candidate_steps(self, run_id: str, instance_key: str | None = None) -> list[int]:
        """The steps a candidate of the set was proposed at, in order (the field names only)."""
        names = await self.redis.hkeys(self.keys.candidates(run_id, instance_key))
        return sorted(int(n[1:]) for n in (wire.string(n) for n in names) if n.startswith("p"))

    async def proposed(self, run_id: str, instance_key: str | None, steps: Iterable[int]) -> list[Candidate]:
        """The candidates proposed at `steps` (those there are), in the order asked (one HMGET)."""
        wanted = [f"p{s}" for s in steps]
        raws = await self.redis.hmget(self.keys.candidates(run_id, instance_key), wanted) if wanted else []
        return [_candidate.decode(raw) for raw in raws if raw is not None]

    async def propose(self, candidate: Candidate) -> bool:
        """Put `candidate` in shadow; False if the current version is no longer its base or another candidate is
        in shadow."""
        run, instance = candidate.run_id, candidate.instance_key
        keys = [self.keys.rubric_set(run, instance), self.keys.candidates(run, instance)]
        args: list[bytes | int] = [candidate.base_version, msgspec.json.encode(candidate), candidate.step]
        return bool(await self._propose(keys=keys, args=args))

    async def decide(self, candidate: Candidate, promoted: RubricSet | None) -> bool:
        """Record the decision `candidate` carries, and write `promoted` as the new current version if given (it
        must follow the current one); its shadow scores go. False if `candidate` is not the one in shadow, or the
        promoted version does not follow."""
        assert candidate.decision is not None
        run, instance = candidate.run_id, candidate.instance_key
        keys = [
            self.keys.rubric_set(run, instance),
            self.keys.runs,
            self.keys.rubric_instances(run),
            self.keys.shadow_scores(run, candidate.step, instance),
            self.keys.candidates(run, instance),
        ]
        args: list[bytes | int | str] = [
            candidate.step,
            msgspec.json.encode(candidate),
            candidate.decision.step,
            msgspec.json.encode(promoted) if promoted else "",
            promoted.version if promoted else 0,
            run,
            instance or "",
        ]
        return bool(await self._decide(keys=keys, args=args))

    async def version(self, run_id: str, instance_key: str | None, version: int) -> RubricSet | None:
        raw = await self.redis.hget(self.keys.rubric_set(run_id, instance_key), f"v{version}")
        return _decoder.decode(raw) if raw else None

    async def versions(self, run_id: str, instance_key: str | None, versions: Iterable[int]) -> list[RubricSet]:
        """Those of `versions` the set has, in the order asked (one HMGET)."""
        wanted = [f"v{v}" for v in versions]
        raws = await self.redis.hmget(self.keys.rubric_set(run_id, instance_key), wanted) if wanted else []
        return [_decoder.decode(raw) for raw in raws if raw is not None]

    async def history(self, run_id: str, instance_key: str | None = None) -> list[RubricSet]:
        """Every version of a rubric set, oldest first."""
        # redis-py types hash replies as bytes | str (decode_responses); this store reads bytes.
        fields = cast(dict[bytes, bytes], await self.redis.hgetall(self.keys.rubric_set(run_id, instance_key)))
        sets = [_decoder.decode(v) for k, v in fields.items() if k.startswith(b"v")]
        return sorted(sets, key=lambda s: s.version)

    async def publish(self, rubric_set: RubricSet) -> bool:
        """Write `rubric_set` as the new current version (its run in the runs index, an instance set's version in
        the run's instance sets); False if it does not follow."""
        written = await self._publish(
            keys=[
                self.keys.rubric_set(rubric_set.run_id, rubric_set.instance_key),
                self.keys.runs,
                self.keys.rubric_instances(rubric_set.run_id),
            ],
            args=[
                rubric_set.version - 1,
                rubric_set.version,
                msgspec.json.encode(rubric_set),
                rubric_set.run_id,
                rubric_set.instance_key or "",
                "" if rubric_set.step is None else rubric_set.step,
            ],
        )
        return bool(written)

    async def made_from(self, run_id: str, instance_key: str | None, step: int) -> RubricSet | None:
        """The version made from `step`'s evidence, if any: the step's field, or the current version when it is
        (a set written before the step fields existed has only this)."""
        key = self.keys.rubric_set(run_id, instance_key)
        made, current = await self.redis.hmget(key, [f"s{step}", "current"])
        found = _decoder.decode(current) if current else None
        if made is not None and (found is None or found.version != int(made)):
            return await self.version(run_id, instance_key, int(made))  # an older version than the current
        return found if found is not None and found.step == step else None

    async def seed(self, rubric_set: RubricSet) -> RubricSet:
        """Install `rubric_set` as version 1 unless the run already has rubrics; return the current set."""
        if rubric_set.version != 1:
            raise ValueError("a seed rubric set is version 1")
        seeded = msgspec.structs.replace(rubric_set, created_at=rubric_set.created_at or time.time())
        await self.publish(seeded)
        current = await self.current(rubric_set.run_id, rubric_set.instance_key)
        assert current is not None
        return current

    async def advance_step(self, run_id: str, step: int) -> int:
        """Record that the rubrics for `step` are in place: among the run's done steps, and in its marker
        (the highest such step, never going back); and on its log, to wake the trainers waiting on it."""
        keys = [self.keys.rubric_step(run_id), self.keys.rubric_steps(run_id), self.keys.rubric_step_log(run_id)]
        return int(await self._advance(keys=keys, args=[step]))

    async def undone(self, run_id: str, steps: Iterable[int]) -> list[int]:
        """Those of `steps` whose rubric update is not complete yet, in order."""
        wanted = sorted(set(steps))
        if not wanted:
            return []
        members = [str(step) for step in wanted]
        scores: list[float | None] = await self.redis.zmscore(self.keys.rubric_steps(run_id), members)
        return [step for step, score in zip(wanted, scores) if score is None]

    async def step(self, run_id: str) -> int | None:
        """The last step whose rubrics are in place, or None."""
        raw = await self.redis.get(self.keys.rubric_step(run_id))
        return int(raw) if raw is not None else None
