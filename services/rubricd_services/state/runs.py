"""The namespace's runs, as its index lists them (`Keys.runs`): each run by when it was last active. The index is
written with every committed answer (the scorer's, the comparer's, the arm's) and every rubric set version, so its
readers (`rubricd status`, the dashboard) take one read per run instead of scanning the keyspace."""

from collections.abc import Callable
from typing import Any, cast

from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd.wire import string


async def listed(redis: Redis, keys: Keys) -> list[str]:
    """Every run of the namespace, by id."""
    found = cast(list[bytes], await redis.zrange(keys.runs, 0, -1))
    return sorted(string(run) for run in found)


async def each(redis: Redis, run_ids: list[str], *reads: Callable[[Any, str], object]) -> list[tuple[Any, ...]]:
    """Each of `reads` for each run, in one pipeline (`read(pipeline, run_id)` queues one command): per run, in
    `run_ids`' order, its replies in `reads`' order."""
    async with redis.pipeline(transaction=False) as pipe:
        for run_id in run_ids:
            for read in reads:
                read(pipe, run_id)
        replies = await pipe.execute()
    n = len(reads)
    return [tuple(replies[i * n : (i + 1) * n]) for i in range(len(run_ids))]
