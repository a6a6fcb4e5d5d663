"""The delivery ledger: the entries a process has received and not finished with, kept from going idle.

An entry counts as in hand from the moment a read of this process receives it (FastStream queues what it read
until a handler is free, and a queued entry must not go idle) until its handler is done, whatever the outcome.
`keep` resets the idle time of every entry in hand, so only what this process has let go of, or what a dead
process held, is reclaimed by another. The details: docs/operators/recover.md, "Delivery".
"""

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from redis.asyncio import Redis

from rubricd_services.runtime.consumer_groups import read_ids

log = logging.getLogger("rubricd.service")

Held = tuple[str, bytes]  # an entry in hand: (consumer, entry id)

# Reset the idle time of the entries (ARGV[3:]) that the consumer ARGV[2] of group ARGV[1] still holds: one that
# was settled, or taken over by another consumer after all, is left alone; in a group that is gone, none is held.
# KEYS: the stream. ARGV: group, consumer, entry ids.
_KEEP = """
local kept = 0
for i = 3, #ARGV do
  local pending = redis.pcall('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if pending.err then
    return kept
  end
  if #pending == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    kept = kept + 1
  end
end
return kept
"""


class Ledger:
    """What one process holds, per consumer, and since when; `service` names it in the log."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._held: collections.Counter[Held] = collections.Counter()  # how many of its deliveries are in hand
        self._since: dict[Held, float] = {}
        self._cancelled = 0  # handlers cancelled at shutdown

    def watch(self, client: Redis, *, fresh: str, reclaimed: str) -> None:
        """Count what `client`'s reads deliver (redis-py's response callbacks: the `fresh` consumer reads with
        XREADGROUP, the `reclaimed` one with XAUTOCLAIM). A read whose reply never arrived counts nothing, so
        what it delivered goes idle and is reclaimed."""
        for command, consumer in (("XREADGROUP", fresh), ("XAUTOCLAIM", reclaimed)):
            client.set_response_callback(
                command, self._receipt(command, consumer, client.response_callbacks.get(command))
            )

    def _receipt(self, command: str, consumer: str, parse: Callable[..., Any] | None) -> Callable[..., Any]:
        def received(response: Any, **options: Any) -> Any:
            parsed = parse(response, **options) if parse else response
            try:
                for entry_id in read_ids(command, parsed):
                    self._hold((consumer, entry_id))
            except Exception:  # never fail the read: what it delivered is held once its handler starts
                log.exception("%s: could not read the entry ids of a %s reply", self.service, command)
            return parsed

        return received

    @contextlib.contextmanager
    def working_on(self, consumer: str, entry_id: bytes) -> Iterator[None]:
        """The body works on the entry, in hand since its read; after it, whatever the outcome, it is not."""
        held = (consumer, entry_id)
        if held not in self._held:  # a read the callbacks did not see
            self._hold(held)
        try:
            yield
        except asyncio.CancelledError:
            self._cancelled += 1
            if self._cancelled == 1:
                log.warning("%s: handlers still running are cancelled; their entries wait for a reclaim", self.service)
            raise
        finally:
            if held in self._held:
                self._let_go(held)

    async def keep(self, redis: Redis, consumer_groups: Sequence[tuple[str, str]], too_old: float) -> None:
        """Reset the idle time of the entries in hand in `consumer_groups` ((stream, group) pairs); with none, a PING. One
        held since before `too_old` (time.monotonic) is let go: its handler never finished, a reclaim retries it."""
        for held in [h for h, since in self._since.items() if since < too_old]:
            log.warning("%s: entry %s, received and never finished, left to a reclaim", self.service, held[1].decode())
            self._let_go(held, all_of_it=True)
        by_consumer: dict[str, list[bytes]] = collections.defaultdict(list)
        for consumer, entry_id in list(self._held):
            by_consumer[consumer].append(entry_id)
        if not by_consumer:
            await redis.ping()
        for stream, group in consumer_groups:  # an id the consumer does not hold in a stream is skipped there
            for consumer, ids in by_consumer.items():
                await redis.register_script(_KEEP)(keys=[stream], args=[group, consumer, *ids])

    def _hold(self, held: Held) -> None:
        self._held[held] += 1
        self._since[held] = time.monotonic()  # the latest delivery's: the sweep must not cut a new one short

    def _let_go(self, held: Held, *, all_of_it: bool = False) -> None:
        self._held[held] -= 1
        if all_of_it or self._held[held] <= 0:
            del self._held[held]
            self._since.pop(held, None)
