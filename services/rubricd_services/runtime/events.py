"""Events: what a service tells the events stream (`rubricd tail`, the dashboard)."""

import time
from typing import Any

from rubricd.messages import Event, EventKind


def event(service: str, kind: EventKind, **fields: Any) -> Event:
    """An Event for the events stream; known fields go to their slots, the rest to `fields`."""
    slots = {k: fields.pop(k) for k in ("run_id", "step", "rollout_id", "detail") if k in fields}
    return Event(service=service, kind=str(kind), at=time.time(), fields=fields, **slots)
