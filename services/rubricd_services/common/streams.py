"""What every consuming service shares about stream entries: decoding, rejecting, events, dead letters, trimming.

All of it leans on Redis itself: a dead letter is written and acked in one
MULTI, and a stream is trimmed only below what every consumer group has
finished with (XINFO GROUPS + XPENDING), so trimming never drops unprocessed
work.
"""

import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

import msgspec
from faststream.message import StreamMessage
from faststream.redis.message import RedisStreamMessage
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rubricd import wire
from rubricd.keys import InvalidKey, Keys
from rubricd.messages import DeadLetter, Event, EventKind, Message
from rubricd.messages._base import MAX_STEP

M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class Notice:
    """A message for whoever sent a rejected entry: written with its dead letter to `stream` (a reply stream,
    which then expires after `ttl_s` unless written again), if that key is a stream or does not exist."""

    stream: str
    message: Message
    ttl_s: int


class Rejected(Exception):
    """An entry that can never be handled as sent: it goes to the dead letters at once, with this reason.

    `notify` is written in the same step: the scorer uses it to tell a waiting
    trainer its rollout was rejected.
    """

    def __init__(self, reason: str, notify: Notice | None = None) -> None:
        super().__init__(reason)
        self.notify = notify


@dataclass(frozen=True)
class Sender:
    """Where to answer an entry that is rejected, and the ids to answer with (as sent, cut to MAX_ECHOED_ID_CHARS:
    ids outside their alphabet are echoed too, so that whoever sent them can match the answer)."""

    reply_to: str
    run_id: str
    id: str  # the entry's own id (rollout_id, comparison_id)
    step: int  # as sent if it is a valid step, else 0


MAX_ECHOED_ID_CHARS = 256  # an id echoed in a rejection is cut to this (valid ids are at most 200 characters)


@functools.cache
def _sender_decoder(id_field: str) -> msgspec.json.Decoder[Any]:
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        ("reply_to", str),
        ("run_id", str),
        (id_field, str),
        ("step", Any, 0),
    ]
    return msgspec.json.Decoder(msgspec.defstruct("Addressed", fields))


def sender(body: bytes, keys: Keys, id_field: str) -> Sender | None:
    """Who sent a rejected entry, read leniently from its JSON: `reply_to` one of `keys`' reply streams, and
    `run_id` and `id_field` any strings; None if the entry has no such fields."""
    try:
        addressed = _sender_decoder(id_field).decode(body)
        reply_to = keys.check_reply_to(addressed.reply_to)
    except (msgspec.DecodeError, InvalidKey, UnicodeError):
        return None
    step = addressed.step
    return Sender(
        reply_to=reply_to,
        run_id=addressed.run_id[:MAX_ECHOED_ID_CHARS],
        id=getattr(addressed, id_field)[:MAX_ECHOED_ID_CHARS],
        step=step if type(step) is int and 0 <= step <= MAX_STEP else 0,
    )


MAX_REASON_CHARS = 2000  # a dead letter's reason is cut to this (an error can quote a whole payload)
MAX_DETAIL_CHARS = 500  # and the dead_lettered event's detail to this

# KEYS: dead letters, events, the entry's stream[, reply stream]
# ARGV: letter, event, maxlen of dead letters, maxlen of events, group, entry id[, notice, notice ttl]
_DEAD_LETTER = """
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', '__data__', ARGV[1])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', '__data__', ARGV[2])
if KEYS[4] then
  local held = redis.call('TYPE', KEYS[4])['ok']
  if held == 'none' or held == 'stream' then
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', '__data__', ARGV[7])
    redis.call('EXPIRE', KEYS[4], ARGV[8])
  end
end
redis.call('XACK', KEYS[3], ARGV[5], ARGV[6])
return 1
"""

# The header the entry parser sets on an entry whose shape is not the wire format's (its value: why).
MALFORMED = "rubricd-malformed"
_FIELD = wire.FIELD.encode()
_EMPTY: dict[bytes, bytes] = {_FIELD: b"{}"}


async def parse_entry(
    raw: Mapping[str, Any], original: Callable[[Mapping[str, Any]], Awaitable[StreamMessage[Any]]]
) -> StreamMessage[Any]:
    """FastStream's parser for a stream entry, held to rubricd's wire format, and never raising.

    The body is the `__data__` field's value exactly: FastStream's own envelope
    (a top-level `data`/`headers` object, its binary format) is not unwrapped, so
    an entry means what the wire format says. An entry of any other shape (other
    or more fields) gets the MALFORMED header and, as its body, its fields as JSON
    (bytes that are not UTF-8 escaped), so it is dead-lettered whole with a reason
    instead of failing before any handler runs and staying pending for ever.
    """
    fields: dict[bytes, bytes] = raw.get("data") or {}
    message = await original({**raw, "data": _EMPTY})  # FastStream's message object, with its ack and group
    message.raw_message = raw
    message.headers = {}
    if list(fields) == [_FIELD]:
        message.body = fields[_FIELD]
        return message
    names = sorted(_text(name) for name in fields)
    message.headers = {MALFORMED: f"entry fields {names}: the wire format is one field, {wire.FIELD!r}"}
    message.body = msgspec.json.encode({_text(k): _text(v) for k, v in fields.items()})
    return message


async def itself(message: StreamMessage[Any]) -> Any:
    """FastStream's decoder, replaced: a handler's one argument is the message itself. Nothing is injected
    (FastStream would resolve an injected message in a worker thread, one hop per message), and the handlers
    decode the body themselves (`decode`), so nothing can fail before they run."""
    return message


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw


def decode(body: bytes, type_: type[M], what: str) -> M:
    """The entry's message, or Rejected("malformed <what>: ...")."""
    try:
        return wire.decode(body, type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise Rejected(f"malformed {what}: {e}") from None


class _Addressed(Protocol):
    """What an Intake's message carries besides its own id."""

    reply_to: str | None
    run_id: str
    step: int


@dataclass(frozen=True)
class Intake(Generic[M]):
    """How a service takes in a message its publisher waits on (a rollout, a comparison, an arm rollout): at most
    `max_bytes`, decoded and checked in one call (`take`), or Rejected with a `rejected` answer for the publisher
    when the entry names a valid reply stream and its ids are strings (`sender`); `refuse` gives a message taken in
    and found unusable later the same answer."""

    type: type[M]  # with a `reply_to` field
    what: str  # the message in the reasons: "rollout"
    id_field: str  # its own id's field: "rollout_id"
    max_bytes: int
    max_bytes_setting: str  # named in the reason: "max_rollout_bytes"
    keys: Keys
    reply_ttl_s: int
    # The rejected answer to a sender, with the reason and, when the message was valid (`refuse`), the message.
    answer: Callable[[Sender, str, M | None], Message]
    check: Callable[[M], None] | None = None  # raises Rejected for what the schema cannot say

    def take(self, body: bytes) -> M:
        try:
            if len(body) > self.max_bytes:
                raise Rejected(f"oversized {self.what}: {len(body)} bytes > {self.max_bytes_setting}={self.max_bytes}")
            message = decode(body, self.type, self.what)
            reply_to: str | None = getattr(message, "reply_to", None)
            if reply_to is not None:
                self.keys.check_reply_to(reply_to)
            if self.check is not None:
                self.check(message)
            return message
        except (Rejected, InvalidKey) as e:
            raise self.rejected(str(e), sender(body, self.keys, self.id_field)) from None

    def refuse(self, message: M, reason: str) -> Rejected:
        """Rejected for a message taken in but found later never to be handled as sent (e.g. naming what its run
        lacks), with the same `rejected` answer as `take` gives, if it named a reply stream."""
        sent = cast(_Addressed, message)
        to = None
        if sent.reply_to is not None:
            to = Sender(sent.reply_to, sent.run_id, getattr(message, self.id_field), sent.step)
        return self.rejected(reason, to, message)

    def rejected(self, reason: str, to: Sender | None, message: M | None = None) -> Rejected:
        notice = None if to is None else Notice(to.reply_to, self.answer(to, reason, message), self.reply_ttl_s)
        return Rejected(reason, notify=notice)


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


def entry_id(msg: RedisStreamMessage) -> bytes:
    """The stream entry id of a message read from a stream."""
    raw: bytes = msg.raw_message["message_ids"][0]
    return raw


def event(service: str, kind: EventKind, **fields: Any) -> Event:
    """An Event for the events stream; known fields go to their slots, the rest to `fields`."""
    slots = {k: fields.pop(k) for k in ("run_id", "step", "rollout_id", "detail") if k in fields}
    return Event(service=service, kind=str(kind), at=time.time(), fields=fields, **slots)


async def dead_letter(
    redis: Redis,
    keys: Keys,
    msg: RedisStreamMessage,
    *,
    service: str,
    reason: str,
    deliveries: int = 1,
    maxlen: int,
    events_maxlen: int,
    max_payload: int,
    notify: Notice | None = None,
) -> None:
    """Move `msg` to the dead-letter stream (capped at `maxlen`) with `reason`, note it on the events stream, and
    ack it, in one script; `notify` as in Rejected (a key of another type than a stream is left alone).

    The letter is bounded: its payload cut to `max_payload` bytes, its reason to MAX_REASON_CHARS.
    """
    stream = msg.raw_message["channel"]
    entry_id = msg.raw_message["message_ids"][0]
    body: bytes = msg.body
    letter = DeadLetter(
        stream=stream,
        entry_id=entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id),
        group=msg.group or "",
        service=service,
        reason=_cut(reason, MAX_REASON_CHARS),
        deliveries=deliveries,
        payload=body[:max_payload],
        payload_size=len(body) if len(body) > max_payload else None,
        at=time.time(),
    )
    note = event(
        service,
        EventKind.DEAD_LETTERED,
        detail=_cut(reason, MAX_DETAIL_CHARS),
        stream=stream,
        entry_id=letter.entry_id,
    )
    script_keys = [keys.dead_letters, keys.events, stream]
    args: list[bytes | str | int] = [
        wire.encode(letter),
        wire.encode(note),
        maxlen,
        events_maxlen,
        letter.group,
        entry_id,
    ]
    if notify:
        script_keys.append(notify.stream)
        args += [wire.encode(notify.message), notify.ttl_s]
    await redis.register_script(_DEAD_LETTER)(keys=script_keys, args=args)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def ensure_group(redis: Redis, stream: str, group: str) -> None:
    """Create `group` reading `stream` from its first entry, unless it exists."""
    try:
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise


async def group_lag(redis: Redis, stream: str, info: dict[str, Any]) -> int:
    """Entries of `stream` not yet delivered to the group `info` (an XINFO GROUPS row) describes:
    Redis's own count, or counted when it cannot tell (Redis < 7, or after deletions)."""
    if info.get("lag") is not None:
        return int(info["lag"])
    last = info["last-delivered-id"]
    after = "(" + (last.decode() if isinstance(last, bytes) else last)
    return len(await redis.xrange(stream, min=after, max="+", count=100_000) or [])


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
