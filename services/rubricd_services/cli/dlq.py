"""`rubricd dlq list | replay`: inspect dead letters and re-publish them (or fixed copies) onto their stream.

A replay writes the payload to the dead letter's original stream and deletes
the dead letter in one Lua script: the delete runs only if the XADD succeeded,
and a dead letter already replayed (gone) is not published twice.
"""

import argparse
from pathlib import Path
from typing import cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import (
    Comparison,
    DeadLetter,
    EventKind,
    Message,
    Rollout,
    RolloutAnalysis,
    RubricsUpdated,
    ScoredRollout,
    StepClosed,
    StepSummary,
)
from rubricd.wire import StreamEntry

from .context import Context, Failed, clip, clock, table

_REPLAY = """
if #redis.call('XRANGE', KEYS[2], ARGV[2], ARGV[2]) == 0 then return false end
local id = redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', ARGV[1], ARGV[4])
return id
"""


SUMMARY = "dead letters: list them, replay them"


def arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = sub.add_parser("list", help="dead letters, oldest first")
    ls.add_argument("--limit", type=int, default=50, help="at most this many, the newest (default 50)")
    ls.add_argument("--json", action="store_true", help="one JSON object per dead letter (payload as text)")
    ls.set_defaults(handler=run_list)
    replay = sub.add_parser("replay", help="re-publish dead letters onto their original stream, then delete them")
    replay.add_argument("ids", nargs="*", metavar="ID", help="dead-letter entry ids (the ID column of `dlq list`)")
    replay.add_argument("--all", action="store_true", help="every dead letter")
    replay.add_argument("--fix-file", type=Path, help="publish this file's JSON instead of the dead payload (one ID)")
    replay.set_defaults(handler=run_replay)


def replayable(keys: Keys) -> dict[str, type[Message]]:
    """The streams a dead letter may go back to, with the message each carries."""
    return {
        keys.rollouts: Rollout,
        keys.comparisons: Comparison,
        keys.steps: StepClosed,
        keys.scored: ScoredRollout,
        keys.analyses: RolloutAnalysis,
        keys.summaries: StepSummary,
        keys.rubrics_updated: RubricsUpdated,
    }


async def run_list(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        newest = cast(list[StreamEntry], await redis.xrevrange(ctx.keys.dead_letters, count=args.limit))
        entries = list(reversed(newest))
    letters = [(i.decode(), _decode(f)) for i, f in entries]
    if args.json:
        for i, d in letters:
            body = msgspec.to_builtins(d) | {"payload": d.payload.decode(errors="replace")} if d else None
            print(msgspec.json.encode({"id": i, **(body or {"undecodable": True})}).decode())
        return 0
    rows = [
        [
            i,
            clock(d.at),
            d.service,
            d.stream.removeprefix(ctx.keys.namespace + ":"),
            d.entry_id,
            d.deliveries,
            clip(d.reason, 60),
            clip(d.payload.decode(errors="replace"), 60),
        ]
        for i, d in letters
        if d
    ]
    print(
        table(rows, ["ID", "TIME", "SERVICE", "STREAM", "ENTRY", "DELIVERIES", "REASON", "PAYLOAD"])
        if rows
        else "no dead letters"
    )
    return 0


async def run_replay(args: argparse.Namespace, ctx: Context) -> int:
    if bool(args.ids) == args.all:
        raise Failed("name dead letters by ID, or --all")
    if args.fix_file and (args.all or len(args.ids) != 1):
        raise Failed("--fix-file replaces the payload of exactly one dead letter")
    async with ctx.redis() as redis:
        letters = await _letters(redis, ctx.keys, None if args.all else args.ids)
        fixed = _fixed(args.fix_file, letters[0][1], ctx.keys) if args.fix_file else None
        for _, letter in letters:  # check them all before writing any
            if letter.stream not in replayable(ctx.keys):
                raise Failed(
                    f"dead letter of {letter.stream!r}: not a stream of namespace {ctx.keys.namespace!r} a replay may write to"
                )
        script = redis.register_script(_REPLAY)
        for dead_id, letter in letters:
            payload = fixed if fixed is not None else letter.payload
            note = wire.entry(_event(dead_id, letter, fixed is not None))[wire.FIELD]
            new_id = await script(
                keys=[letter.stream, ctx.keys.dead_letters, ctx.keys.events],
                args=[wire.FIELD, dead_id, payload, note, 100_000],
            )
            if new_id is None:
                print(f"{dead_id}: already replayed or deleted, skipped")
            else:
                how = f" (fixed payload from {args.fix_file})" if fixed is not None else ""
                print(f"{dead_id}: replayed onto {letter.stream} as {new_id.decode()}{how}")
    return 0


async def _letters(redis: Redis, keys: Keys, ids: list[str] | None) -> list[tuple[str, DeadLetter]]:
    entries: list[StreamEntry]
    if ids is None:
        entries = cast(list[StreamEntry], await redis.xrange(keys.dead_letters))
    else:
        entries = [e for i in ids for e in cast(list[StreamEntry], await redis.xrange(keys.dead_letters, min=i, max=i))]
        missing = set(ids) - {i.decode() for i, _ in entries}
        if missing:
            raise Failed(f"no dead letter {', '.join(sorted(missing))} in {keys.dead_letters}")
    letters = [(i.decode(), _decode(f)) for i, f in entries]
    bad = [i for i, d in letters if d is None]
    if bad:
        raise Failed(f"not a dead letter: {', '.join(bad)}")
    return cast(list[tuple[str, DeadLetter]], letters)  # none is None: checked above


def _fixed(path: Path, letter: DeadLetter, keys: Keys) -> bytes:
    """The fix file's payload, checked against the message its stream carries."""
    payload = path.read_bytes().strip()
    type_ = replayable(keys).get(letter.stream)
    if type_ is not None:
        try:
            wire.decode(payload, type_)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise Failed(f"{path} is not a valid {type_.__name__}: {e}") from None
    return payload


def _event(dead_id: str, letter: DeadLetter, fixed: bool) -> Message:
    from rubricd_services.runtime.events import event

    return event(
        "cli",
        EventKind.DEAD_LETTER_REPLAYED,
        detail=f"{letter.stream} {letter.entry_id}",
        dead_letter=dead_id,
        fixed=fixed,
    )


def _decode(fields: dict[bytes, bytes]) -> DeadLetter | None:
    try:
        return wire.decode(wire.payload(fields), DeadLetter)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
