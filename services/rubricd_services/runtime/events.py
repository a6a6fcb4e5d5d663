"""Events: what a service tells the events stream (`rubricd tail`, the dashboard).

`Events.publish` is how a service's code appends them (or queues them on a MULTI it commits); a Lua script that
commits an event with its effects appends it with the script's own `append` (runtime.commit).
"""

import time
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event, EventKind


def event(service: str, kind: EventKind, **fields: Any) -> Event:
    """An Event for the events stream; known fields go to their slots, the rest to `fields`."""
    slots = {k: fields.pop(k) for k in ("run_id", "step", "rollout_id", "detail") if k in fields}
    return Event(service=service, kind=str(kind), at=time.time(), fields=fields, **slots)


class Events:
    """The events stream as a service writes it, capped at `maxlen` entries."""

    def __init__(self, redis: Redis, keys: Keys, maxlen: int) -> None:
        self.redis, self.stream, self.maxlen = redis, keys.events, maxlen

    async def publish(self, *events: Event) -> None:
        """Append `events`, one entry each."""
        for e in events:
            await self.redis.xadd(self.stream, wire.entry(e), maxlen=self.maxlen, approximate=True)

    def queue(self, pipe: Pipeline, *events: Event) -> None:
        """Queue `events` on `pipe`, to be appended when it executes (with the rest of its MULTI)."""
        for e in events:
            pipe.xadd(self.stream, wire.entry(e), maxlen=self.maxlen, approximate=True)
