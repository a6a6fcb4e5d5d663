"""Each stream of a namespace and its consumer groups: length, consumers, pending entries, lag and the oldest
pending entry's age (`rubricd status`, the dashboard)."""

import time
from typing import Any, TypedDict, cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rubricd.keys import Keys
from rubricd.wire import entry_ms, string


class PendingEntry(TypedDict):
    """One row of XPENDING's extended form as redis-py parses it (ids and names are bytes: decode_responses=False)."""

    message_id: bytes
    consumer: bytes
    time_since_delivered: int  # ms
    times_delivered: int


async def group_lag(redis: Redis, stream: str, info: dict[str, Any]) -> int:
    """Entries of `stream` not yet delivered to the group `info` (an XINFO GROUPS row) describes:
    Redis's own count, or counted when it cannot tell (Redis < 7, or after deletions)."""
    if info.get("lag") is not None:
        return int(info["lag"])
    last = info["last-delivered-id"]
    after = "(" + (last.decode() if isinstance(last, bytes) else last)
    return len(await redis.xrange(stream, min=after, max="+", count=100_000) or [])


def streams(keys: Keys) -> list[str]:
    return [
        keys.rollouts,
        keys.comparisons,
        keys.arm,
        keys.steps,
        keys.scored,
        keys.analyses,
        keys.summaries,
        keys.rubrics_updated,
        keys.rubric_candidates,
        keys.events,
        keys.dead_letters,
    ]


async def stream_status(redis: Redis, stream: str) -> dict[str, Any]:
    length = await redis.xlen(stream)
    try:
        groups = await redis.xinfo_groups(stream)
    except ResponseError:  # no such stream (yet)
        groups = []
    return {"stream": stream, "length": length, "groups": [await group_status(redis, stream, g) for g in groups]}


async def group_status(redis: Redis, stream: str, info: dict[str, Any]) -> dict[str, Any]:
    name = string(info["name"])
    consumers = await redis.xinfo_consumers(stream, name)
    oldest_age = oldest_idle = None
    if info["pending"]:
        # redis-py types the rows dict[str, bytes | str | int]; each key's type is fixed
        [first] = cast(list[PendingEntry], await redis.xpending_range(stream, name, min="-", max="+", count=1))
        oldest_age = max(0.0, time.time() - entry_ms(first["message_id"]) / 1000)
        oldest_idle = first["time_since_delivered"] / 1000
    return {
        "group": name,
        "consumers": [
            {"name": string(c["name"]), "pending": c["pending"], "idle_s": c["idle"] / 1000} for c in consumers
        ],
        "pending": info["pending"],
        "lag": await group_lag(redis, stream, info),
        "last_delivered": string(info["last-delivered-id"]),
        "oldest_pending_age_s": oldest_age,
        "oldest_pending_idle_s": oldest_idle,
    }
