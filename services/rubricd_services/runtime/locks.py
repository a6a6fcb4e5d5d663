"""Leases held for as long as their holder lives: the one renewal loop (`renewed`), and redis-py's Lock held with it.

A holder that dies lets its lease expire; one that lives keeps it however long its work takes. The work under it
must still be safe without it (a compare-and-set, a commit made once, behind it), since a stalled holder can lose
it: that is logged, never raised. The gatherings' claims (runtime.gathering) are renewed the same way.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from redis.asyncio.lock import Lock
from redis.exceptions import LockError

from rubricd_services.runtime.outage import dependency

log = logging.getLogger("rubricd.locks")


@contextlib.asynccontextmanager
async def renewed(renew: Callable[[], Awaitable[bool]], every_s: float, what: str) -> AsyncIterator[None]:
    """Call `renew` every `every_s` while the block runs; `what` names the lease in the logs. `renew` False: the
    lease was lost (it expired, or another holds it now), and renewing ends; an error is logged (an outage is the
    service's to report, once) and the next renewal tried."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                if not await renew():
                    log.warning("%s was lost (expired) while held", what)
                    return
            except Exception as e:
                if dependency(e) is None:
                    log.warning("could not renew %s: %r", what, e)

    renewing = asyncio.create_task(loop())
    try:
        yield
    finally:
        renewing.cancel()


@contextlib.asynccontextmanager
async def held(lock: Lock, lock_s: float, what: str) -> AsyncIterator[None]:
    """Keep the acquired `lock` alive while the block runs (renewed every third of `lock_s`), then release it."""

    async def reacquire() -> bool:
        try:
            await lock.reacquire()
        except LockError:
            return False
        return True

    try:
        async with renewed(reacquire, lock_s / 3, what):
            yield
    finally:
        try:
            await lock.release()
        except LockError:
            log.warning("%s expired before its work ended", what)
