"""The judge cache: a judge that makes the same judge call once.

A verdict is kept (`Keys.verdict`, for `judge_cache_ttl_s`) under the sha256 of everything that decided it:
the exact messages the judge reads, its model and temperature, and the rubric set and version. `Cached`, the
judge of one rollout, computes that digest from the messages it is given, reads the verdict kept under it (or
takes it as read ahead, in its caller's round trip), and otherwise asks the judge it wraps; it says whether it
answered (`answered`: no call) and leaves a new verdict for the score's commit to keep (`keep`). In a process,
a call being made, or made in the last `ttl_s` (its twin may have read Redis before its commit kept it), is
shared with its twin, and a failed call is not kept. The rules: docs/integrators/index.md, "The judge cache".
"""

import asyncio
import collections
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd.messages import Rollout, RubricSet
from rubricd_services.settings import LLMSettings

from .scoring import Call, Judge

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


class VerdictCache:
    """The judge cache of a process: verdicts kept in Redis (`Keys.verdict`), and twins shared in the process."""

    def __init__(self, redis: Redis, keys: Keys, ttl_s: float) -> None:
        self.redis, self.keys, self.recent = redis, keys, JudgeCache(ttl_s)

    def judge(self, ask: Judge, rubric_set: RubricSet, llm: LLMSettings, rollout: Rollout, *, on: bool) -> "Cached":
        """The judge of `rollout` under `rubric_set` through this cache, asking `ask` (the LLM's judge, `llm`'s);
        `on` False (or a TTL of 0): `ask` itself."""
        return Cached(self, ask, rubric_set, llm, rollout, on=on and self.recent.ttl_s > 0)


class Cached:
    """One rollout's judge through the cache (a scoring.Judge). Before judging, `ahead` names the verdict's key for
    the caller to read with its own reads, and `read` hands its value back. After judging: `answered`, whether
    the cache answered (a kept verdict or a twin's: no call), or None (the cache is off, or the call failed);
    `keep`, a new verdict's key and value, for the score's commit to keep (None: nothing new)."""

    def __init__(
        self, cache: VerdictCache, ask: Judge, rubric_set: RubricSet, llm: LLMSettings, rollout: Rollout, *, on: bool
    ) -> None:
        self.cache, self.ask, self.rubric_set, self.llm, self.rollout = cache, ask, rubric_set, llm, rollout
        self.on = on
        self.answered: bool | None = None
        self.keep: tuple[str, bytes] | None = None
        # read ahead (`ahead`, `read`): the one call's messages, their digest, and the value kept under it
        self._messages: list[dict[str, str]] | None = None
        self._digest = ""
        self._kept: bytes | str | None = None

    def ahead(self, calls: Sequence[Call]) -> tuple[str, ...]:
        """The key of the verdict of the rollout's one call (none: the cache is off, or several calls), to read
        before the call, with the caller's own reads; `read` hands back its value."""
        if not self.on or len(calls) != 1:
            return ()
        self._messages = calls[0].messages(self.rollout)
        self._digest = digest(self.rubric_set, self.llm, self._messages, self.rollout)
        return (self.cache.keys.verdict(self._digest),)

    def read(self, values: Sequence[bytes | str | None]) -> None:
        """The values of the `ahead` keys, as read."""
        if self._messages is not None:
            [self._kept] = values

    async def __call__(self, messages: list[dict[str, str]], verdict: type[msgspec.Struct]) -> msgspec.Struct:
        if not self.on:
            return await self.ask(messages, verdict)
        if self._messages is not None and self._messages == messages:  # read ahead
            found, kept = self._digest, self._kept
        else:
            found = digest(self.rubric_set, self.llm, messages, self.rollout)
            kept = await self.cache.redis.get(self.cache.keys.verdict(found))
        value, self.answered = await self.cache.recent.verdict(
            found, verdict, kept, lambda: self.ask(messages, verdict)
        )
        self.keep = None if self.answered else (self.cache.keys.verdict(found), encode(value))
        return value
