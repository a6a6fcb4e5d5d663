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

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Candidate, RubricSet
from rubricd.views import RubricView
from rubricd_services.runtime.commit import Script

# `instance` and `step` are '' for none (the run's own set; a seed, made from no step's evidence).
_PUBLISH = Script(
    keys="rubric_set runs instances",
    args="expected version rubric_set run instance step",
    body="""
local cur = redis.call('HGET', k_rubric_set, 'current')
local expected = tonumber(a_expected)
if cur then
  if cjson.decode(cur)['version'] ~= expected then return 0 end
elseif expected ~= 0 then
  return 0
end
redis.call('HSET', k_rubric_set, 'v' .. a_version, a_rubric_set, 'current', a_rubric_set)
if a_step ~= '' then redis.call('HSET', k_rubric_set, 's' .. a_step, a_version) end
redis.call('ZADD', k_runs, redis.call('TIME')[1], a_run)
if a_instance ~= '' then redis.call('HSET', k_instances, a_instance, a_version) end
return 1
""",
)

_ADVANCE = Script(
    keys="marker done log",
    args="step",
    body="""
redis.call('ZADD', k_done, a_step, a_step)
redis.call('XADD', k_log, 'MAXLEN', '~', 100, '*', 'step', a_step)
redis.call('EXPIRE', k_log, 86400)
local cur = tonumber(redis.call('GET', k_marker) or '-1')
if tonumber(a_step) > cur then redis.call('SET', k_marker, a_step) end
return math.max(cur, tonumber(a_step))
""",
)

_PROPOSE = Script(
    keys="rubric_set candidates",
    args="base_version candidate step",
    body="""
local cur = redis.call('HGET', k_rubric_set, 'current')
if not cur or cjson.decode(cur)['version'] ~= tonumber(a_base_version) then return 0 end
if redis.call('HEXISTS', k_rubric_set, 'candidate') == 1 then return 0 end
redis.call('HSET', k_rubric_set, 'candidate', a_candidate)
redis.call('HSET', k_candidates, 'p' .. a_step, a_candidate)
return 1
""",
)

# `promoted` is '' (and `version` 0) when the candidate is rejected.
_DECIDE = Script(
    keys="rubric_set runs instances shadow_scores candidates",
    args="step candidate decided_at promoted version run instance",
    body="""
local pending = redis.call('HGET', k_rubric_set, 'candidate')
if not pending or cjson.decode(pending)['step'] ~= tonumber(a_step) then return 0 end
if a_promoted ~= '' then
  local cur = redis.call('HGET', k_rubric_set, 'current')
  if not cur or cjson.decode(cur)['version'] ~= tonumber(a_version) - 1 then return 0 end
  redis.call('HSET', k_rubric_set, 'v' .. a_version, a_promoted, 'current', a_promoted, 's' .. a_step, a_version)
  redis.call('ZADD', k_runs, redis.call('TIME')[1], a_run)
  if a_instance ~= '' then redis.call('HSET', k_instances, a_instance, a_version) end
end
redis.call('HDEL', k_rubric_set, 'candidate')
redis.call('DEL', k_shadow_scores)
redis.call('HSET', k_candidates, 'p' .. a_step, a_candidate, 'd' .. a_decided_at, a_step)
return 1
""",
)

_decoder = msgspec.json.Decoder(RubricSet)
_candidate = msgspec.json.Decoder(Candidate)


@dataclass(frozen=True)
class Shadowing:
    """Where a run's (or instance's) candidate stands, seen from one step: the one `pending` (in shadow), the one
    `proposed` at the step, the one `decided` at it."""

    pending: Candidate | None
    proposed: Candidate | None
    decided: Candidate | None


class RubricStore(RubricView):
    """The rubric sets the services write: versions, candidates and their decisions, and each run's done steps."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        super().__init__(redis, keys)
        self._publish = _PUBLISH.register(redis)
        self._advance = _ADVANCE.register(redis)
        self._propose = _PROPOSE.register(redis)
        self._decide = _DECIDE.register(redis)

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
        keys = {"rubric_set": self.keys.rubric_set(run, instance), "candidates": self.keys.candidates(run, instance)}
        args: dict[str, bytes | int] = {
            "base_version": candidate.base_version,
            "candidate": msgspec.json.encode(candidate),
            "step": candidate.step,
        }
        return bool(await self._propose(keys=keys, args=args))

    async def decide(self, candidate: Candidate, promoted: RubricSet | None) -> bool:
        """Record the decision `candidate` carries, and write `promoted` as the new current version if given (it
        must follow the current one); its shadow scores go. False if `candidate` is not the one in shadow, or the
        promoted version does not follow."""
        assert candidate.decision is not None
        run, instance = candidate.run_id, candidate.instance_key
        keys = {
            "rubric_set": self.keys.rubric_set(run, instance),
            "runs": self.keys.runs,
            "instances": self.keys.rubric_instances(run),
            "shadow_scores": self.keys.shadow_scores(run, candidate.step, instance),
            "candidates": self.keys.candidates(run, instance),
        }
        args: dict[str, bytes | int | str] = {
            "step": candidate.step,
            "candidate": msgspec.json.encode(candidate),
            "decided_at": candidate.decision.step,
            "promoted": msgspec.json.encode(promoted) if promoted else "",
            "version": promoted.version if promoted else 0,
            "run": run,
            "instance": instance or "",
        }
        return bool(await self._decide(keys=keys, args=args))

    async def publish(self, rubric_set: RubricSet) -> bool:
        """Write `rubric_set` as the new current version (its run in the runs index, an instance set's version in
        the run's instance sets); False if it does not follow."""
        run, instance = rubric_set.run_id, rubric_set.instance_key
        keys = {
            "rubric_set": self.keys.rubric_set(run, instance),
            "runs": self.keys.runs,
            "instances": self.keys.rubric_instances(run),
        }
        args: dict[str, bytes | int | str] = {
            "expected": rubric_set.version - 1,
            "version": rubric_set.version,
            "rubric_set": msgspec.json.encode(rubric_set),
            "run": run,
            "instance": instance or "",
            "step": "" if rubric_set.step is None else rubric_set.step,
        }
        return bool(await self._publish(keys=keys, args=args))

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
        keys = {
            "marker": self.keys.rubric_step(run_id),
            "done": self.keys.rubric_steps(run_id),
            "log": self.keys.rubric_step_log(run_id),
        }
        return int(await self._advance(keys=keys, args={"step": step}))
