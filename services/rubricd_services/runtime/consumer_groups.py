"""Consumer groups: creating them, the entries a read delivered, and trimming a stream below what every group has finished with.

Trimming leans on Redis itself (XINFO GROUPS + XPENDING): a stream is trimmed only below the oldest entry any
group still holds or has not read, so trimming never drops unprocessed work.
"""

from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError


def read_ids(command: str, reply: Any) -> list[bytes]:
    """The entry ids a parsed XREADGROUP (`[[stream, entries], ...]`, or `{stream: entries}`) or XAUTOCLAIM
    (`[next id, entries, deleted]`) reply delivered, as redis-py parses them by default; an entry is
    `(id, fields)`, or an id alone (JUSTID)."""
    if not reply:
        return []
    if command == "XAUTOCLAIM":
        batches = [reply[1]]
    else:
        batches = list(reply.values()) if isinstance(reply, dict) else [entries for _, entries in reply]
    return [e if isinstance(e, bytes) else e[0] for entries in batches for e in entries or []]


async def ensure_group(redis: Redis, stream: str, group: str) -> None:
    """Create `group` reading `stream` from its first entry, unless it exists."""
    try:
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise


async def trim_consumed(redis: Redis, stream: str) -> int:
    """Drop entries every consumer group has acked; return how many went."""
    try:
        groups = await redis.xinfo_groups(stream)
    except ResponseError:  # no such stream yet
        return 0
    if not groups:
        return 0
    floors = []
    for group in groups:
        pending = await redis.xpending(stream, group["name"])
        oldest = pending["min"] if pending["pending"] else None
        floors.append(_id(oldest) if oldest else _next(_id(group["last-delivered-id"])))
    return await redis.xtrim(stream, minid=_fmt(min(floors)), approximate=False)


def _id(raw: bytes | str) -> tuple[int, int]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _next(entry_id: tuple[int, int]) -> tuple[int, int]:
    return entry_id[0], entry_id[1] + 1


def _fmt(entry_id: tuple[int, int]) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"
