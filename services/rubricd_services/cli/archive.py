"""`rubricd archive RUN -o FILE`: a finished run's Redis keys and memory written to a file, then deleted."""

import argparse
import base64
import json
import os
import time
from pathlib import Path
from typing import Any, cast

from redis.asyncio import Redis

from rubricd.keys import Keys

from .context import Context, Failed
from .memory import connected

SUMMARY = "write a finished run's keys and memory to a file, then delete them"
HELP = """\
Archive a finished run: every Redis key of the run (its rubric set versions, kept rollouts, comparisons and
Rubric-ARM rewards, usage, accuracy, schedule, health, canaries, ...; one JSON line each, with its type and
value) and every memory of it in Weaviate (analyses, summaries, the rubric history; one JSON line each) are
written to FILE; once the file is written and synced, they are deleted, and the run leaves the runs index.
Keys shared by runs (the streams, cached verdicts) are left. A run active in the last --idle seconds (an
answer or a rubric set written) is refused; --keep writes the file and deletes nothing.
"""


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--output", "-o", type=Path, required=True, metavar="FILE", help="the archive (JSON lines)")
    p.add_argument("--idle", type=float, default=600, metavar="S", help="refuse a run active since (default 600)")
    p.add_argument("--keep", action="store_true", help="write the archive, delete nothing")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    run_id: str = args.run_id
    if args.output.exists():
        raise Failed(f"{args.output} exists: an archive is never overwritten")
    async with ctx.redis() as redis:
        others = [r for r in await run_ids(redis, ctx.keys) if r.startswith(f"{run_id}:")]
        if others:  # its keys could not be told from theirs
            raise Failed(f"run ids {others[:3]} start with {run_id!r}: archive them first")
        active = await redis.zscore(ctx.keys.runs, run_id)
        if active is not None and time.time() - active < args.idle:
            raise Failed(f"run {run_id!r} was active {time.time() - active:.0f} s ago (--idle {args.idle:g})")
        keys = await run_keys(redis, ctx.keys, run_id)
        async with connected(ctx) as memory:
            written = 0
            with args.output.open("x") as out:
                for key in keys:
                    if (line := await dump(redis, key)) is not None:
                        out.write(json.dumps(line) + "\n")
                        written += 1
                memories = 0
                async for item in memory.every(run_id):
                    fields = {f: getattr(item, f) for f in item.__struct_fields__}
                    out.write(json.dumps({"memory": fields | {"message": item.message.decode()}}) + "\n")
                    memories += 1
                out.flush()
                os.fsync(out.fileno())
            if written == 0 and memories == 0:
                args.output.unlink()
                raise Failed(f"run {run_id!r} has no keys and no memories")
            print(f"{args.output}: {written} keys, {memories} memories of run {run_id!r}")
            if args.keep:
                return 0
            dropped = await memory.drop_run(run_id)
        deleted = sum([await redis.delete(*keys[i : i + 1000]) for i in range(0, len(keys), 1000)])
        await redis.zrem(ctx.keys.runs, run_id)
    print(f"deleted {deleted} keys and {dropped} memories")
    return 0


async def run_ids(redis: Redis, keys: Keys) -> list[str]:
    return [r.decode() for r in cast(list[bytes], await redis.zrange(keys.runs, 0, -1))]


async def run_keys(redis: Redis, keys: Keys, run_id: str) -> list[bytes]:
    """The run's keys: `<namespace>:<family>:<run>` and `<namespace>:<family>:<run>:...` (a scan: an archive is rare)."""
    prefix = f"{keys.namespace}:"
    found = []
    async for key in redis.scan_iter(match=f"{_glob(prefix)}*", count=1000):
        parts = key.decode().removeprefix(prefix).split(":", 1)
        if len(parts) == 2 and (parts[1] == run_id or parts[1].startswith(f"{run_id}:")):
            found.append(key)
    return sorted(found)


async def dump(redis: Redis, key: bytes) -> dict[str, Any] | None:
    """One key as an archive line: its name, type, value and TTL (None if it expired meanwhile)."""
    kind = _text(await redis.type(key))
    value: Any
    if kind == "string":
        value = _text(await redis.get(key))
    elif kind == "hash":
        value = _pairs(await redis.hgetall(key))
    elif kind == "stream":
        value = [[_text(i), _pairs(f)] for i, f in cast(list[Any], await redis.xrange(key))]
    elif kind == "zset":
        value = [[_text(m), s] for m, s in cast(list[Any], await redis.zrange(key, 0, -1, withscores=True))]
    elif kind == "set":
        value = sorted(_text(m) for m in cast(set[Any], await redis.smembers(key)))
    elif kind == "list":
        value = [_text(m) for m in cast(list[Any], await redis.lrange(key, 0, -1))]
    else:  # "none": expired since the scan
        return None
    return {"key": key.decode(), "type": kind, "ttl_ms": await redis.pttl(key), "value": value}


def _pairs(fields: Any) -> dict[str, Any]:
    return {_text(k): _text(v) for k, v in cast(dict[Any, Any], fields).items()}


def _text(raw: Any) -> Any:
    """A value as text, or {"base64": ...} if it is not UTF-8."""
    if not isinstance(raw, bytes):
        return raw
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def _glob(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
