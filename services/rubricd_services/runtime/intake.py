"""Taking in a stream entry: held to the wire format, decoded, checked, or rejected with a reason.

An entry that can never be handled as sent is `Rejected`: the service dead-letters it at once (runtime.dead_letters)
and, where the entry names a valid reply stream, answers its sender (`Notice`). Nothing here raises on bad bytes:
a malformed entry, however deep or large, is a rejection, never a retried failure.
"""

import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

import msgspec
from faststream.message import StreamMessage
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.keys import InvalidKey, Keys
from rubricd.messages import MAX_STEP, Message

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
    decoder = _sender_decoder(id_field)
    try:
        try:
            addressed = decoder.decode(body)
        except RecursionError:
            addressed = decoder.decode(shallow(body))
        reply_to = keys.check_reply_to(addressed.reply_to)
    except (msgspec.DecodeError, InvalidKey, UnicodeError, RecursionError):
        return None
    step = addressed.step
    return Sender(
        reply_to=reply_to,
        run_id=addressed.run_id[:MAX_ECHOED_ID_CHARS],
        id=getattr(addressed, id_field)[:MAX_ECHOED_ID_CHARS],
        step=step if type(step) is int and 0 <= step <= MAX_STEP else 0,
    )


# A JSON string, or a bracket outside strings.
_STRUCTURE = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def shallow(body: bytes) -> bytes:
    """`body` with every value nested inside a top-level value replaced by null: the part of an entry nested too
    deep to decode that `sender` needs (its top-level ids and reply stream). Scans brackets and strings only."""
    parts, depth, kept = [], 0, 0
    for token in _STRUCTURE.finditer(body):
        bracket = token.group()
        if bracket[:1] == b'"':
            continue
        if bracket in (b"[", b"{"):
            depth += 1
            if depth == 2:
                parts += [body[kept : token.start()], b"null"]
        else:
            if depth == 2:
                kept = token.end()
            depth -= 1
    return b"".join([*parts, body[kept:]])


_escaped = functools.partial(wire.string, errors="backslashreplace")  # bytes that are not UTF-8 shown, not raised

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
    names = sorted(_escaped(name) for name in fields)
    message.headers = {MALFORMED: f"entry fields {names}: the wire format is one field, {wire.FIELD!r}"}
    message.body = msgspec.json.encode({_escaped(k): _escaped(v) for k, v in fields.items()})
    return message


async def itself(message: StreamMessage[Any]) -> Any:
    """FastStream's decoder, replaced: a handler's one argument is the message itself. Nothing is injected
    (FastStream would resolve an injected message in a worker thread, one hop per message), and the handlers
    decode the body themselves (`decode`), so nothing can fail before they run."""
    return message


def decode(body: bytes, type_: type[M], what: str) -> M:
    """The entry's message, or Rejected("malformed <what>: ...")."""
    try:
        return wire.decode(body, type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise Rejected(f"malformed {what}: {e}") from None


class Addressed(Protocol):
    """What an Intake's message carries besides its own id."""

    reply_to: str | None
    run_id: str
    step: int


@dataclass(frozen=True, kw_only=True)
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
            raise self.rejection(str(e), sender(body, self.keys, self.id_field)) from None

    def refuse(self, message: M, reason: str) -> Rejected:
        """Rejected for a message taken in but found later never to be handled as sent (e.g. naming what its run
        lacks), with the same `rejected` answer as `take` gives, if it named a reply stream."""
        sent = cast(Addressed, message)
        to = None
        if sent.reply_to is not None:
            to = Sender(sent.reply_to, sent.run_id, getattr(message, self.id_field), sent.step)
        return self.rejection(reason, to, message)

    def rejection(self, reason: str, to: Sender | None, message: M | None = None) -> Rejected:
        notice = None if to is None else Notice(to.reply_to, self.answer(to, reason, message), self.reply_ttl_s)
        return Rejected(reason, notify=notice)


def entry_id(msg: RedisStreamMessage) -> bytes:
    """The stream entry id of a message read from a stream."""
    raw: bytes = msg.raw_message["message_ids"][0]
    return raw
