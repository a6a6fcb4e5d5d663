"""The updater's Redis side: the run's update lock and the commit.

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
from rubricd_services.common.outage import dependency

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
        """Hold the run's update lock for as long as the update runs: renewed every `lock_timeout_s / 3`, it
        expires `lock_timeout_s` after its holder died. A waiter waits while the holder lives."""
        # thread_local=False: the token is this coroutine's own, not shared by every handler on the thread.
        name = self.keys.update_lock(run_id, instance_key)
        lock = self.redis.lock(name, timeout=self.lock_timeout_s, thread_local=False)
        await lock.acquire()

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.lock_timeout_s / 3)
                try:
                    await lock.reacquire()
                except LockError:
                    log.warning("the update lock of %s/%s was lost (expired)", run_id, instance_key)
                    return
                except Exception as e:
                    if dependency(e) is None:  # an outage is the service's to report, once
                        log.exception("could not renew the update lock of %s/%s", run_id, instance_key)

        renewing = asyncio.create_task(renew())
        try:
            yield
        finally:
            renewing.cancel()
            try:
                await lock.release()
            except LockError:  # it expired meanwhile: the store's compare-and-set still kept the update safe
                log.warning("the update lock of %s/%s expired before the update ended", run_id, instance_key)

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
