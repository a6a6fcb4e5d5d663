"""The wire format: one stream entry, one field, one JSON message.

Every entry on every rubricd stream has a single field `__data__` whose value
is the UTF-8 JSON of one message (the field FastStream reads natively). Any
language can publish with `XADD <stream> * __data__ <json>`.
"""

from typing import TypeVar

import msgspec
from redis.typing import EncodableT, FieldT

from .messages import Message

FIELD = "__data__"
T = TypeVar("T")

# A stream entry as a reader with decode_responses=False gets it: (entry id, fields), all bytes. redis-py types
# entries for any client (bytes or str, and (None, None) for an entry deleted under XCLAIM): readers cast what
# XRANGE, XREVRANGE and XREAD answer to these.
StreamEntry = tuple[bytes, dict[bytes, bytes]]
StreamRead = list[tuple[bytes, list[StreamEntry]]]  # XREAD: (stream, its new entries) per stream

_encoder = msgspec.json.Encoder()


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def entry(message: Message) -> dict[FieldT, EncodableT]:
    """The fields of the stream entry that carries `message`.

    Typed as redis-py's own field mapping: `xadd` takes an invariant
    `dict[FieldT, EncodableT]`, which a `dict[str, bytes]` does not match.
    """
    return {FIELD: _encoder.encode(message)}


def decode(data: bytes | str, type_: type[T]) -> T:
    """Decode and validate one message (or any msgspec type); raises msgspec.ValidationError/DecodeError only."""
    try:
        return msgspec.json.decode(data, type=type_)
    except UnicodeDecodeError as e:  # msgspec lets this through for a string that is not UTF-8
        raise msgspec.DecodeError(f"JSON is malformed: not UTF-8 ({e.reason} at byte {e.start})") from None
    except RecursionError:  # nesting deeper than msgspec follows (it raises this while skipping unknown fields)
        raise msgspec.DecodeError("JSON is malformed: nested too deeply") from None


def payload(fields: dict[bytes, bytes]) -> bytes:
    """The message body of a raw stream entry as redis-py returns it."""
    return fields.get(FIELD.encode(), b"")


def string(raw: bytes | str, errors: str = "strict") -> str:
    """A value as redis-py returns it (bytes, without decode_responses) as text."""
    return raw.decode("utf-8", errors) if isinstance(raw, bytes) else raw


def entry_ms(entry_id: bytes | str) -> int:
    """The millisecond timestamp in a stream entry id."""
    return int(string(entry_id).partition("-")[0])
