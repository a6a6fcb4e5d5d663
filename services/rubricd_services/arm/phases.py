"""Rubric-ARM's phases: which model each step of a run trains, decided once per step for every trainer process.

The first arm process to reward a rollout of a step writes the step's decision with a compare-and-set
(`Keys.arm_phases`), following the run's plan (`rubricd arm phases`) or the service's RUBRICD_ARM_* settings;
every other process, and every later rollout, reads that decision. The process whose decision is written, and
whose step trains something else than the step before, writes the `arm_phase` event in the same script: one
event per switch. The plan and the decision are rubricd.messages.Plan and PhaseDecision; `explain` and the reads are
`rubricd_services.state.arm`.
"""

import asyncio
import time

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import EventKind, PhaseDecision, Plan
from rubricd_services.runtime import events
from rubricd_services.state.arm import explain, read_plan

CACHED_DECISIONS = 4096  # decisions a process keeps in memory (they never change: a miss only costs a read)

# KEYS: the run's phases hash, the events stream. ARGV: step, decision, the switch's event ('' if none), maxlen.
# Returns the step's decision: this one if it was the first, else the one already written.
_DECIDE = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 and ARGV[3] ~= '' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', '__data__', ARGV[3])
end
return redis.call('HGET', KEYS[1], ARGV[1])
"""


class Phases:
    """The phase decisions of every run, in Redis; each is read (or made) once per process and kept."""

    def __init__(self, redis: Redis, keys: Keys, plan: Plan, *, maxlen: int, service: str = "arm") -> None:
        """`plan`: a run's plan unless it has its own."""
        self.redis, self.keys, self.plan, self.maxlen, self.service = redis, keys, plan, maxlen, service
        self._decide = redis.register_script(_DECIDE)
        self._decisions: dict[tuple[str, int], asyncio.Future[PhaseDecision]] = {}

    async def decision(self, run_id: str, step: int) -> PhaseDecision:
        key = (run_id, step)
        entry = self._decisions.get(key)
        if entry is None or (entry.done() and entry.exception() is not None):
            entry = self._decisions[key] = asyncio.ensure_future(self._get(run_id, step))
            while len(self._decisions) > CACHED_DECISIONS:
                del self._decisions[next(iter(self._decisions))]
        return await asyncio.shield(entry)

    async def _get(self, run_id: str, step: int) -> PhaseDecision:
        phases = self.keys.arm_phases(run_id)
        raw, before = await self.redis.hmget(phases, [str(step), str(step - 1)])
        if raw is not None:
            return msgspec.json.decode(raw, type=PhaseDecision)
        plan = await read_plan(self.redis, self.keys, run_id) or self.plan
        training, why = plan.training(step)
        decision = PhaseDecision(step=step, training=training, why=why, plan=plan, decided_at=time.time())
        previous = (
            msgspec.json.decode(before, type=PhaseDecision).training
            if before is not None
            else plan.training(step - 1)[0]
            if step > 0
            else None
        )
        event = b""
        if training != previous:
            event = wire.encode(
                events.event(
                    self.service,
                    EventKind.ARM_PHASE,
                    run_id=run_id,
                    step=step,
                    detail=explain(decision),
                    training=training,
                    previous=previous,
                )
            )
        stored = await self._decide(
            keys=[phases, self.keys.events], args=[step, msgspec.json.encode(decision), event, self.maxlen]
        )
        return msgspec.json.decode(stored, type=PhaseDecision)
