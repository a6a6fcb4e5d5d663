"""The judge cache: the same judge call is not made twice.

A verdict is kept (`Keys.verdict`, for `judge_cache_ttl_s`) under the sha256 of everything that decided it:
the exact messages the judge reads, its model and temperature, and the rubric set and version. The scorer reads
a kept verdict in its one read before judging and keeps a new one in the score's commit, so the cache itself
does no I/O; in a process, a call being made is shared with its twin, and a failed call is not kept. The rules:
docs/integrators/index.md, "The judge cache".
"""

import asyncio
import hashlib
from collections.abc import Awaitable, Callable

import msgspec

from rubricd.messages import RubricSet
from rubricd_services.common.settings import LLMSettings

_encoder = msgspec.json.Encoder()


def digest(rubric_set: RubricSet, judge: LLMSettings, messages: list[dict[str, str]]) -> str:
    """The cache key's hash of one judge call."""
    decided_by = [rubric_set.run_id, rubric_set.instance_key, rubric_set.version, judge.model, judge.temperature]
    return hashlib.sha256(_encoder.encode([*decided_by, messages])).hexdigest()


def encode(verdict: msgspec.Struct) -> bytes:
    """A verdict as it is kept."""
    return _encoder.encode(verdict)


def _decoded(raw: bytes | str | None, verdict: type[msgspec.Struct]) -> msgspec.Struct | None:
    """A kept verdict, or None (none kept, or one that no longer decodes as `verdict`)."""
    try:
        return None if raw is None else msgspec.json.decode(raw, type=verdict)
    except msgspec.MsgspecError:
        return None


class JudgeCache:
    """Which verdict a judge call gets: the one kept, a twin's being made in this process, or a new one."""

    def __init__(self) -> None:
        self._finding: dict[str, asyncio.Task[tuple[msgspec.Struct, bool]]] = {}  # this process's calls

    async def verdict(
        self,
        digest: str,
        verdict: type[msgspec.Struct],
        kept: bytes | str | None,
        judge: Callable[[], Awaitable[msgspec.Struct]],
    ) -> tuple[msgspec.Struct, bool]:
        """The verdict of this call, and whether it was reused: `kept` (the bytes read under its digest, or None)
        if it decodes as `verdict`, or the one this process is finding now for another rollout, or else
        `judge()`'s, for the caller to keep. Raises what `judge()` raises (JudgeFailed)."""
        if (found := _decoded(kept, verdict)) is not None:
            return found, True
        if (finding := self._finding.get(digest)) is not None:
            return (await asyncio.shield(finding))[0], True  # its JudgeFailed too
        task = self._finding[digest] = asyncio.ensure_future(self._judged(judge))
        task.add_done_callback(lambda done: self._finding.pop(digest) if self._finding.get(digest) is done else None)
        return await asyncio.shield(task)

    @staticmethod
    async def _judged(judge: Callable[[], Awaitable[msgspec.Struct]]) -> tuple[msgspec.Struct, bool]:
        return await judge(), False
