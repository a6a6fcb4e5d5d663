"""What every command gets: the settings, the namespace's keys, a Redis client; and column printing."""

import contextlib
import datetime
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd_services.settings import ServiceSettings


@dataclass
class Context:
    settings: ServiceSettings
    keys: Keys

    @contextlib.asynccontextmanager
    async def redis(self) -> AsyncIterator[Redis]:
        client = Redis.from_url(self.settings.redis_url, decode_responses=False)
        try:
            yield client
        finally:
            await client.aclose()


class Failed(Exception):
    """A command that cannot do what was asked: its message is printed, the exit status is 1."""


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """Plain text in aligned columns; the last column is never padded."""
    cells = [[str(c) for c in header], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]).rstrip() for r in cells)


def clock(at: float | None, date: bool = True) -> str:
    """A timestamp in UTC, as an operator reads it next to logs."""
    if at is None:
        return "-"
    t = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S.%f")[: None if date else -3]


def ago(seconds: float | None) -> str:
    """A duration, short: 850ms, 12.3s, 4m05s, 2h07m."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def clip(text: str, width: int) -> str:
    """One line of at most `width` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def share(x: float | None) -> str:
    """A share (an agreement, a rate) in two decimals; `-` for none."""
    return "-" if x is None else f"{x:.2f}"
