"""The judge cache: the same judge call is not made twice.

A verdict is kept (`Keys.verdict`, for `judge_cache_ttl_s`) under the sha256 of everything that decided it:
the exact messages the judge reads, its model and temperature, and the rubric set and version. The scorer reads
a kept verdict in its one read before judging and keeps a new one in the score's commit, so the cache itself
does no I/O; in a process, a call being made, or made in the last `ttl_s` (its twin may have read Redis before
its commit kept it), is shared with its twin, and a failed call is not kept. The rules:
docs/integrators/index.md, "The judge cache".
"""

import asyncio
import collections
import hashlib
import time
from collections.abc import Awaitable, Callable

import msgspec

from rubricd.messages import Rollout, RubricSet
from rubricd_services.common.settings import LLMSettings

_encoder = msgspec.json.Encoder()


def digest(
    rubric_set: RubricSet, judge: LLMSettings, messages: list[dict[str, str]], rollout: Rollout | None = None
) -> str:
    """The cache key's hash of one judge call; with `rollout`, of its whole trajectory too (the messages may show
    a trajectory cut to fit the judge's prompt: two that differ only where it was cut are not one call)."""
    decided_by = [rubric_set.run_id, rubric_set.instance_key, rubric_set.version, judge.model, judge.temperature]
    whole = [rollout.trajectory, rollout.tools] if rollout is not None and rollout.trajectory else []
    return hashlib.sha256(_encoder.encode([*decided_by, messages, *whole])).hexdigest()


def encode(verdict: msgspec.Struct) -> bytes:
    """A verdict as it is kept."""
    return _encoder.encode(verdict)


def _decoded(raw: bytes | str | None, verdict: type[msgspec.Struct]) -> msgspec.Struct | None:
    """A kept verdict, or None (none kept, or one that no longer decodes as `verdict`)."""
    try:
        return None if raw is None else msgspec.json.decode(raw, type=verdict)
    except msgspec.MsgspecError:
        return None


RECENT = 4096  # this process's latest calls kept for their twins


class JudgeCache:
    """Which verdict a judge call gets: the one kept, a twin's made in this process (being made, or made within
    `ttl_s` and not failed), or a new one."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        # this process's latest calls, oldest first: when each was asked, and its task
        self._finding: collections.OrderedDict[str, tuple[float, asyncio.Task[tuple[msgspec.Struct, bool]]]] = (
            collections.OrderedDict()
        )

    async def verdict(
        self,
        digest: str,
        verdict: type[msgspec.Struct],
        kept: bytes | str | None,
        judge: Callable[[], Awaitable[msgspec.Struct]],
    ) -> tuple[msgspec.Struct, bool]:
        """The verdict of this call, and whether it was reused: `kept` (the bytes read under its digest, or None)
        if it decodes as `verdict`, or the one this process is finding or found for another rollout, or else
        `judge()`'s, for the caller to keep. Raises what `judge()` raises (JudgeFailed)."""
        if (found := _decoded(kept, verdict)) is not None:
            return found, True
        now = time.monotonic()
        if (recent := self._finding.get(digest)) is not None and now - recent[0] < self.ttl_s:
            return (await asyncio.shield(recent[1]))[0], True  # its JudgeFailed too
        task = asyncio.ensure_future(self._judged(judge))
        self._finding[digest] = (now, task)
        self._finding.move_to_end(digest)
        if len(self._finding) > RECENT:
            self._finding.popitem(last=False)
        task.add_done_callback(lambda done: self._forget(digest, done) if done.exception() else None)
        return await asyncio.shield(task)

    def _forget(self, digest: str, failed: asyncio.Task[tuple[msgspec.Struct, bool]]) -> None:
        """A failed call is not shared once over: a later rollout of the same content calls again."""
        if (recent := self._finding.get(digest)) is not None and recent[1] is failed:
            del self._finding[digest]

    @staticmethod
    async def _judged(judge: Callable[[], Awaitable[msgspec.Struct]]) -> tuple[msgspec.Struct, bool]:
        return await judge(), False
