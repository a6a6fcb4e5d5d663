"""`rubricd tail`: follow the events stream live (XREAD BLOCK), filtered by run, service and kind."""

import argparse
import sys
import time
from typing import cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.messages import Event, EventKind
from rubricd.wire import StreamEntry, StreamRead
from rubricd_services.state.events import kind, matches

from .context import Context, clip, clock

BLOCK_MS = 1000


SUMMARY = "follow the events every service writes"
HELP = """\
Follow the events stream live: one line per event (time, service, kind, run/step/rollout, detail,
fields), or JSON lines with --json.
"""


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", help="only events of this run")
    p.add_argument("--service", action="append", help="only events of this service (repeatable)")
    p.add_argument(
        "--kind",
        nargs="+",
        action="extend",
        type=kind,
        choices=list(EventKind),
        metavar="KIND",
        help=f"only these event kinds: {', '.join(EventKind)}",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line (the Event plus its entry id)")
    p.add_argument("--since", default="$", help="$ (default): new events only; 0: from the oldest kept; or an entry id")
    p.add_argument("--count", type=int, help="stop after this many matching events (exit 1 if --timeout comes first)")
    p.add_argument("--timeout", type=float, help="stop after this many seconds")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    stream = ctx.keys.events
    deadline = time.monotonic() + args.timeout if args.timeout is not None else None
    shown = 0
    async with ctx.redis() as redis:
        since = await start_id(redis, stream, args.since)
        print(f"following {stream} after {since}", file=sys.stderr, flush=True)
        last: bytes | str = since  # then the id of the last entry read (bytes)
        while args.count is None or shown < args.count:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            block = BLOCK_MS if left is None else max(1, min(BLOCK_MS, int(left * 1000)))
            for _, entries in cast(StreamRead, await redis.xread({stream: last}, count=100, block=block)) or []:
                for entry_id, fields in entries:
                    last = entry_id
                    event = _decode(fields)
                    if (
                        event is not None
                        and matches(event, args.run, args.service, args.kind)
                        and (args.count is None or shown < args.count)
                    ):
                        print(line(entry_id.decode(), event, args.json), flush=True)
                        shown += 1
    if args.count is not None and shown < args.count:
        print(f"rubricd tail: {shown} of {args.count} events before the timeout", file=sys.stderr)
        return 1
    return 0


async def start_id(redis: Redis, stream: str, since: str) -> str:
    """`$` pinned to the newest entry now, so nothing written between two reads is missed."""
    if since != "$":
        return since
    newest = cast(list[StreamEntry], await redis.xrevrange(stream, count=1))
    return newest[0][0].decode() if newest else "0-0"


def line(entry_id: str, event: Event, as_json: bool) -> str:
    if as_json:
        return msgspec.json.encode({"id": entry_id, **msgspec.to_builtins(event)}).decode()
    where = "/".join(str(x) for x in (event.run_id, event.step, event.rollout_id) if x is not None) or "-"
    fields = " ".join(f"{k}={_short(v)}" for k, v in event.fields.items() if v is not None)
    detail = clip(event.detail, 100) if event.detail else ""
    return "  ".join(
        x
        for x in (
            clock(event.at, date=False),
            f"{event.service:<10}",
            f"{event.kind:<20}",
            f"{where:<24}",
            detail,
            fields,
        )
        if x
    ).rstrip()


def _short(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return clip(str(value), 60)


def _decode(fields: dict[bytes, bytes]) -> Event | None:
    try:
        return wire.decode(wire.payload(fields), Event)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # not an event: nothing to show
