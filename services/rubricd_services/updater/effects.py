"""The updater's Redis side: the run's update lock and the commit.

A new rubric set version itself is written by the store's compare-and-set
(`RubricStore.publish`, called from `update`); what follows it is here:
advancing the run's step marker, then announcing, logging and acking in one
MULTI.
"""

import contextlib
from collections.abc import AsyncIterator

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Candidate, Event, RubricsUpdated
from rubricd_services.runtime import locks
from rubricd_services.runtime.events import Events
from rubricd_services.state.rubric_sets import RubricStore


class Effects:
    def __init__(self, redis: Redis, keys: Keys, consumer_group: str, *, maxlen: int, update_lock_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.consumer_group = consumer_group
        self.maxlen = maxlen
        self.events = Events(redis, keys, maxlen)
        self.update_lock_s = update_lock_s
        self.store = RubricStore(redis, keys)

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str, instance_key: str | None) -> AsyncIterator[None]:
        """Hold the run's update lock for as long as the update runs: renewed every `update_lock_s / 3`, it
        expires `update_lock_s` after its holder died. A waiter waits while the holder lives."""
        # thread_local=False: the token is this coroutine's own, not shared by every handler on the thread.
        name = self.keys.update_lock(run_id, instance_key)
        lock = self.redis.lock(name, timeout=self.update_lock_s, thread_local=False)
        await lock.acquire()
        async with locks.held(lock, self.update_lock_s, f"the update lock of {run_id}/{instance_key}"):
            yield

    async def commit(
        self,
        entry_id: bytes,
        run_id: str,
        step: int,
        events: list[Event],
        announcement: RubricsUpdated | Candidate | None,
    ) -> None:
        """Advance the step marker, then announce (a new version on rubrics-updated, a candidate proposed or
        rejected on rubric-candidates), log and ack in one MULTI."""
        await self.store.advance_step(run_id, step)
        async with self.redis.pipeline(transaction=True) as pipe:
            if announcement is not None:
                stream = (
                    self.keys.rubric_candidates if isinstance(announcement, Candidate) else self.keys.rubrics_updated
                )
                pipe.xadd(stream, wire.entry(announcement), maxlen=self.maxlen, approximate=True)
            self.events.queue(pipe, *events)
            pipe.xack(self.keys.summaries, self.consumer_group, entry_id)
            await pipe.execute()
