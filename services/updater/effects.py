"""The updater's Redis side: the run's update lock, keeping a long update's entry claimed, and the commit.

A new rubric set version itself is written by the store's compare-and-set
(`RubricStore.publish`, called from `update`); what follows it is here:
advancing the run's step marker, then announcing, logging and acking in one
MULTI.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from redis.asyncio import Redis
from redis.exceptions import LockError

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event
from rubricd.store import RubricStore

log = logging.getLogger("rubricd.updater")


class Effects:
    def __init__(self, redis: Redis, keys: Keys, group: str, *, maxlen: int, lock_timeout_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.group = group
        self.maxlen = maxlen
        self.lock_timeout_s = lock_timeout_s
        self.store = RubricStore(redis, keys)

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str, instance_key: str | None) -> AsyncIterator[None]:
        """Hold the run's update lock; it expires on its own if its holder dies."""
        # thread_local=False: the token is this coroutine's own, not shared by every handler on the thread.
        wait_s = self.lock_timeout_s + 5
        name = self.keys.update_lock(run_id, instance_key)
        lock = self.redis.lock(name, timeout=self.lock_timeout_s, blocking_timeout=wait_s, thread_local=False)
        if not await lock.acquire():
            raise LockError(f"update lock of {run_id}/{instance_key} not free after {wait_s:g} s")
        try:
            yield
        finally:
            try:
                await lock.release()
            except LockError:  # it expired meanwhile: the store's compare-and-set still kept the update safe
                log.warning("the update lock of %s/%s expired before the update ended", run_id, instance_key)

    @contextlib.asynccontextmanager
    async def keep_claimed(self, entry_id: bytes, consumer: str, idle_ms: int) -> AsyncIterator[None]:
        """Keep a live update's entry from looking idle for `idle_ms`: an update can outlast it (a slow
        model, a wait for the run's lock), and a reclaimer must only take entries of dead updaters.
        XCLAIM ... JUSTID resets the idle time without counting a delivery."""

        async def beat() -> None:
            while True:
                await asyncio.sleep(idle_ms / 3000)
                try:
                    await self.redis.xclaim(self.keys.summaries, self.group, consumer, 0, [entry_id], justid=True)
                except Exception:
                    log.exception("could not keep summary entry %s claimed", entry_id)

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()

    async def commit(
        self, entry_id: bytes, run_id: str, step: int, events: list[Event], announcement: bytes | None
    ) -> None:
        """Advance the step marker, then announce, log and ack in one MULTI."""
        await self.store.advance_step(run_id, step)
        async with self.redis.pipeline(transaction=True) as pipe:
            if announcement is not None:
                pipe.xadd(self.keys.rubrics_updated, {wire.FIELD: announcement}, maxlen=self.maxlen, approximate=True)
            for event in events:
                pipe.xadd(self.keys.events, wire.entry(event), maxlen=self.maxlen, approximate=True)
            pipe.xack(self.keys.summaries, self.group, entry_id)
            await pipe.execute()
