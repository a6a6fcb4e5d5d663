"""Dead letters: an entry that can never be handled goes to the dead-letter stream with its reason, in one step.

The letter, its event, the sender's answer (if any) and the ack are written by one script: all or none.
"""

import time

from faststream.redis.message import RedisStreamMessage
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import DeadLetter, EventKind
from rubricd_services.runtime.events import event
from rubricd_services.runtime.intake import Notice

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
