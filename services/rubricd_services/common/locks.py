"""A Redis lock held for as long as its holder lives: redis-py's Lock, renewed every third of its lifetime.

A holder that dies lets the lock expire after `lock_s`; one that lives keeps it however long its work takes.
The work under it must still be safe without it (a compare-and-set behind it), since a stalled holder can lose
it: that is logged, never raised.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from redis.asyncio.lock import Lock
from redis.exceptions import LockError

from .outage import dependency

log = logging.getLogger("rubricd.locks")


@contextlib.asynccontextmanager
async def held(lock: Lock, lock_s: float, what: str) -> AsyncIterator[None]:
    """Keep the acquired `lock` alive while the block runs, then release it; `what` names it in the logs."""

    async def renew() -> None:
        while True:
            await asyncio.sleep(lock_s / 3)
            try:
                await lock.reacquire()
            except LockError:
                log.warning("%s was lost (expired) while held", what)
                return
            except Exception as e:
                if dependency(e) is None:  # an outage is the service's to report, once
                    log.exception("could not renew %s", what)

    renewing = asyncio.create_task(renew())
    try:
        yield
    finally:
        renewing.cancel()
        try:
            await lock.release()
        except LockError:
            log.warning("%s expired before its work ended", what)
