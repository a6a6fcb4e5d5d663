"""Rubric sets in Redis: versioned per run (and instance), written atomically.

One hash per run and instance: field `v<N>` holds version N, field `current`
holds a copy of the newest one, so reading the current set is one HGET, and
field `s<step>` the version made from that training step's evidence, so finding
it is one read however many versions the run has. A new version is written only
if it directly follows the current one (a Lua compare-and-set), so two writers
can never race on one rubric set. With promotion gated, the hash also holds the
candidate in shadow (`candidate`), read with the current set in one HMGET
(`in_force`) and written by its own state: rubricd_services.state.promotion.
"""

import time

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd.messages import Candidate, RubricSet
from rubricd.views import RubricView
from rubricd_services.runtime.commit import Script

# The Lua that reads the current version and writes a new one, so the hash's layout is written here only: the
# scripts that make a version (`_PUBLISH`, a promotion's decision in state.promotion) run it, with the keys
# `rubric_set`, `runs` and `instances` among theirs. `instance` and `step` are '' for none (the run's own set; a
# seed, made from no step's evidence).
VERSIONS = """
local function current_version()
  local cur = redis.call('HGET', k_rubric_set, 'current')
  return cur and cjson.decode(cur)['version']
end
local function write_version(version, rubric_set, step, run, instance)
  redis.call('HSET', k_rubric_set, 'v' .. version, rubric_set, 'current', rubric_set)
  if step ~= '' then redis.call('HSET', k_rubric_set, 's' .. step, version) end
  redis.call('ZADD', k_runs, redis.call('TIME')[1], run)
  if instance ~= '' then redis.call('HSET', k_instances, instance, version) end
end
"""

_PUBLISH = Script(
    keys="rubric_set runs instances",
    args="expected version rubric_set run instance step",
    body=VERSIONS
    + """
if (current_version() or 0) ~= tonumber(a_expected) then return 0 end
write_version(a_version, a_rubric_set, a_step, a_run, a_instance)
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

_decoder = msgspec.json.Decoder(RubricSet)
_candidate = msgspec.json.Decoder(Candidate)


class RubricStore(RubricView):
    """The rubric sets the services write: their versions, and each run's done steps."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        super().__init__(redis, keys)
        self._publish = _PUBLISH.register(redis)
        self._advance = _ADVANCE.register(redis)

    async def in_force(self, run_id: str, instance_key: str | None = None) -> tuple[RubricSet | None, Candidate | None]:
        """The current set and the candidate in shadow on it, if any (one HMGET)."""
        current, pending = await self.redis.hmget(self.keys.rubric_set(run_id, instance_key), ["current", "candidate"])
        found = _decoder.decode(current) if current else None
        candidate = _candidate.decode(pending) if pending else None
        if found is None or candidate is None or candidate.base_version != found.version:
            return found, None
        return found, candidate

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
