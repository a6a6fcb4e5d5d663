"""The judge cache: the same judge call is not made twice.

A verdict is kept (`Keys.verdict`, for `judge_cache_ttl_s`) under the sha256 of everything that decided it:
the exact messages the judge reads, its model and temperature, and the rubric set and version. In a process a
call being made is shared with its twin; a failed call is not kept, and Redis failing makes a miss, never a
failed score. The rules: docs/integrators/index.md, "The judge cache".
"""

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable

import msgspec
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rubricd.keys import Keys
from rubricd.messages import RubricSet
from rubricd_services.common.settings import LLMSettings

_encoder = msgspec.json.Encoder()
log = logging.getLogger("rubricd.scorer")


def digest(rubric_set: RubricSet, judge: LLMSettings, messages: list[dict[str, str]]) -> str:
    """The cache key's hash of one judge call."""
    decided_by = [rubric_set.run_id, rubric_set.instance_key, rubric_set.version, judge.model, judge.temperature]
    return hashlib.sha256(_encoder.encode([*decided_by, messages])).hexdigest()


class Unread:
    """A kept verdict not read yet."""


UNREAD = Unread()


def _decoded(raw: bytes | str | None, verdict: type[msgspec.Struct]) -> msgspec.Struct | None:
    """A kept verdict, or None (none kept, or one that no longer decodes as `verdict`)."""
    try:
        return None if raw is None else msgspec.json.decode(raw, type=verdict)
    except msgspec.MsgspecError:
        return None


class JudgeCache:
    """Verdicts in Redis by `digest`; with a ttl of 0, off (nothing read or written)."""

    def __init__(self, redis: Redis, keys: Keys, ttl_s: int) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = ttl_s
        self._finding: dict[str, asyncio.Task[tuple[msgspec.Struct, bool]]] = {}  # this process's lookups

    @property
    def enabled(self) -> bool:
        return self.ttl_s > 0

    async def verdict(
        self,
        digest: str,
        verdict: type[msgspec.Struct],
        judge: Callable[[], Awaitable[msgspec.Struct]],
        kept: bytes | str | None | Unread = UNREAD,
    ) -> tuple[msgspec.Struct, bool]:
        """The verdict of this call, and whether it was reused: the one kept, or the one this process is finding
        now for another rollout, or else `judge()`'s (then kept). Raises what `judge()` raises (JudgeFailed).
        `kept`: the kept verdict's bytes where the caller read them already (the scorer, in its one read before
        judging), else read here."""
        if not self.enabled:
            return await judge(), False
        if (finding := self._finding.get(digest)) is not None:
            return (await asyncio.shield(finding))[0], True  # its JudgeFailed too
        task = self._finding[digest] = asyncio.ensure_future(self._find(digest, verdict, judge, kept))
        task.add_done_callback(lambda done: self._finding.pop(digest) if self._finding.get(digest) is done else None)
        return await asyncio.shield(task)

    async def _find(
        self,
        digest: str,
        verdict: type[msgspec.Struct],
        judge: Callable[[], Awaitable[msgspec.Struct]],
        kept: bytes | str | None | Unread,
    ) -> tuple[msgspec.Struct, bool]:
        found = await self.get(digest, verdict) if isinstance(kept, Unread) else _decoded(kept, verdict)
        if found is not None:
            return found, True
        value = await judge()
        await self.put(digest, value)
        return value, False

    async def get(self, digest: str, verdict: type[msgspec.Struct]) -> msgspec.Struct | None:
        """The kept verdict, or None (none kept, or one that no longer decodes as `verdict`)."""
        if not self.enabled:
            return None
        try:
            return _decoded(await self.redis.get(self.keys.verdict(digest)), verdict)
        except RedisError as e:
            log.warning("judge cache: reading a verdict failed (judging instead): %s", e)
            return None

    async def put(self, digest: str, verdict: msgspec.Struct) -> None:
        if not self.enabled:
            return
        try:
            await self.redis.set(self.keys.verdict(digest), _encoder.encode(verdict), ex=self.ttl_s)
        except RedisError as e:
            log.warning("judge cache: keeping a verdict failed: %s", e)
