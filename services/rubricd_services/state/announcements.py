"""The RubricsUpdated that produced each rubric version (`rubricd rubrics`, the dashboard): from the announcements
stream, or, once it has been trimmed, from the memory's rubric_update records."""

import contextlib

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import RubricsUpdated
from rubricd_services.settings import ServiceSettings
from rubricd_services.state.history import announced


async def announcements(
    redis: Redis, keys: Keys, settings: ServiceSettings, run_id: str, instance: str | None, wanted: list[int]
) -> dict[int, RubricsUpdated]:
    """The RubricsUpdated that produced each wanted version: from the stream, else from memory."""
    found = await announced(redis, keys, run_id, instance)
    if any(v not in found for v in wanted):
        for u in await remembered(settings, run_id, instance):
            found.setdefault(u.version, u)
    return found


async def remembered(settings: ServiceSettings, run_id: str, instance: str | None) -> list[RubricsUpdated]:
    """The run's rubric_update records in memory; none if the memory cannot be reached."""
    from rubricd_services.memory.store import (  # Weaviate's client is slow to import: only when needed
        Memory,
        MemoryKind,
    )

    try:
        memory = await Memory.connect(settings, _NoEmbedder())
    except Exception:
        return []
    try:
        items = await memory.recent(run_id, MemoryKind.RUBRIC_UPDATE, limit=10_000, instance_key=instance)
    except Exception:  # the memory failed mid-read: the versions show without their rationale
        return []
    finally:
        await memory.close()
    out = []
    for item in items:
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            out.append(wire.decode(item.message, RubricsUpdated))
    return [u for u in out if u.instance_key == instance]


class _NoEmbedder:
    """Listing memory needs no vectors."""

    dimensions = None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("not used")
