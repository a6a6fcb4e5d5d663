"""A decision made once per (run, step) for every process: the meta-class schedule's, Rubric-ARM's phases.

The first process to decide a step writes its decision with a compare-and-set (HSETNX on the run's hash, field
<step>), with its event if it has one, in one script; every other process, and every later call, reads the
decision written. Each is read (or made) once per process and kept: a decision never changes, so a miss only
costs a read.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.messages import Event
from rubricd_services.runtime.commit import Script

CACHED_DECISIONS = 4096  # decisions a process keeps in memory

# Returns the step's decision: this one if it was the first, else the one already written. `event` '': none.
_DECIDE = Script(
    keys="decisions events",
    args="step decision event maxlen",
    body="""
if redis.call('HSETNX', k_decisions, a_step, a_decision) == 1 and a_event ~= '' then
  append(k_events, a_maxlen, a_event)
end
return redis.call('HGET', k_decisions, a_step)
""",
)

D = TypeVar("D", bound=msgspec.Struct)
Make = Callable[[], Awaitable[tuple[D, Event | None]]]


class StepDecisions(Generic[D]):
    """The decisions of every run kept in the hash `key(run_id)` (field <step>: the decision, JSON)."""

    def __init__(self, redis: Redis, kind: type[D], key: Callable[[str], str], *, events: str, maxlen: int) -> None:
        self.redis, self.key, self.events, self.maxlen = redis, key, events, maxlen
        self._decoder = msgspec.json.Decoder(kind)
        self._decide = _DECIDE.register(redis)
        self._kept: dict[tuple[str, int], asyncio.Future[D]] = {}

    async def get(self, run_id: str, step: int, make: Make[D]) -> D:
        """The step's decision: the one written, else the one `make` gives (with its event, or None), written now
        unless another process wrote first. A failed read or write is not kept: the next call tries again."""
        key = (run_id, step)
        entry = self._kept.get(key)
        if entry is None or (entry.done() and entry.exception() is not None):
            entry = self._kept[key] = asyncio.ensure_future(self._get(run_id, step, make))
            while len(self._kept) > CACHED_DECISIONS:
                del self._kept[next(iter(self._kept))]
        return await asyncio.shield(entry)

    async def _get(self, run_id: str, step: int, make: Make[D]) -> D:
        raw = await self.redis.hget(self.key(run_id), str(step))
        if raw is not None:
            return self._decoder.decode(raw)
        decision, event = await make()
        stored = await self._decide(
            keys={"decisions": self.key(run_id), "events": self.events},
            args={
                "step": step,
                "decision": msgspec.json.encode(decision),
                "event": b"" if event is None else wire.encode(event),
                "maxlen": self.maxlen,
            },
        )
        return self._decoder.decode(stored)
