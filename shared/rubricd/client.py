"""The trainer's side: publish rollouts, read scores, close steps, wait for rubrics.

    async with RubricdClient("redis://127.0.0.1:6399/0") as client:
        scores = await client.score(rollouts)

Each client reads its own reply stream (`<namespace>:replies:<client_id>`, deleted on close) with one
background task that serves every waiting call; `SyncRubricdClient` offers the same calls to synchronous code
and many threads. A Redis restart or failover is ridden out: calls retry within their timeout and rollouts
still waiting are published again. Details: docs/integrators/index.md.
"""

import asyncio
import concurrent.futures
import contextlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar, cast

import msgspec
from redis import exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, Redis

from . import wire
from .keys import DEFAULT_NAMESPACE, Keys
from .messages import ArmReward, ArmRollout, Comparison, Preference, Rollout, Score, StepClosed
from .views import RubricView

T = TypeVar("T")
log = logging.getLogger("rubricd.client")
# What a Redis restart or failover looks like from here; anything else is a real error.
_OUTAGE = (redis_errors.ConnectionError, redis_errors.TimeoutError, redis_errors.BusyLoadingError, OSError)
_BACKOFF_S = (0.05, 2.0)  # first and longest wait between tries
_BLOCK_MS = 1000  # how long a reply read waits on the server for something new (close() is seen within it)
# A read that gets no reply within this times out (redis-py's socket timeout, stated: 5 s from redis-py 8 on,
# none before). Well over _BLOCK_MS, so a blocking read times out only when Redis, or this process's event loop,
# stalled that long; then a PING tells a slow Redis from an unreachable one.
_SOCKET_TIMEOUT_S = 10.0
_PING_TIMEOUT_S = 5.0  # no answer to a PING within this: Redis is unreachable
# A reply stream carries every kind of reply, tagged by `type`.
_reply_decoder = msgspec.json.Decoder(Score | Preference | ArmReward)
Reply = Score | Preference | ArmReward
Request = Rollout | Comparison | ArmRollout
_Key = tuple[str, str, str]  # (what is awaited, run id, its id): ("score", run, rollout id), ...
_USER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # a user name that can prefix a client id

# redis-py types stream replies for every protocol and decode_responses setting at
# once (list or dict, bytes or str). This client talks RESP2 with bytes replies:
# XRANGE/XREVRANGE answer [(id, fields), ...] and XREAD [[stream, entries], ...].
_Entries = list[tuple[bytes, dict[bytes, bytes]]]
_XRead = list[tuple[bytes, _Entries]]


class ReplyTimeout(TimeoutError):
    """Some requests got no reply in time: `missing` names their ids (rollout or comparison ids), `replies` holds
    those that did arrive (id -> its Score, Preference or ArmReward)."""

    def __init__(
        self,
        missing: list[str],
        timeout: float,
        replies: Mapping[str, Any] | None = None,
        what: str = "rollout",
        awaited: str = "scored",
    ) -> None:
        self.missing = missing
        self.replies = dict(replies or {})
        shown = ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else "")
        super().__init__(f"{len(missing)} {what}(s) not {awaited} within {timeout:g} s: {shown}")

    @property
    def scores(self) -> dict[str, Any]:
        """`replies`, under the name of the class this one replaced (so are `preferences` and `rewards`)."""
        return self.replies

    preferences = rewards = scores


# The names of the three classes ReplyTimeout replaced: `except ScoreTimeout` catches a timeout of `score`.
ScoreTimeout = PreferenceTimeout = ArmRewardTimeout = ReplyTimeout


class InvalidRollout(ValueError):
    """A rollout (or comparison) the scorer (or the comparer) would reject as sent; the message names the field."""


def checked(message: Request) -> bytes:
    """The message's wire bytes, once they pass the same validation the services apply."""
    data = wire.encode(message)
    try:
        wire.decode(data, type(message))
    except msgspec.ValidationError as e:
        name = (
            f"comparison {message.comparison_id!r}"
            if isinstance(message, Comparison)
            else f"{'arm ' if isinstance(message, ArmRollout) else ''}rollout {message.rollout_id!r}"
        )
        raise InvalidRollout(f"{name} of run {message.run_id!r}: {e}") from None
    return data


def grouped(rollouts: Sequence[Rollout]) -> None:
    """Raise InvalidRollout if the rollouts of one sample group (run, step, group) disagree on its size, or are more
    than it (a rollout id counted once): a batch the scorer could not judge as the trainer meant."""
    members: dict[tuple[str, int, str], dict[str, int | None]] = {}
    for r in rollouts:
        if r.group is not None:
            members.setdefault((r.run_id, r.step, r.group), {})[r.rollout_id] = r.group_size
    for (run, step, group), sizes in members.items():
        given = sorted({s for s in sizes.values() if s is not None})
        if len(given) > 1:
            raise InvalidRollout(f"group {group!r} of run {run!r} step {step}: its rollouts give sizes {given}")
        if given and len(sizes) > given[0]:
            raise InvalidRollout(
                f"group {group!r} of run {run!r} step {step}: {len(sizes)} rollouts, more than its size {given[0]}"
            )


def _awaited(message: Request) -> _Key:
    """What answers `message`: its reply's kind, run and id."""
    match message:
        case Rollout():
            return ("score", message.run_id, message.rollout_id)
        case Comparison():
            return ("preference", message.run_id, message.comparison_id)
        case ArmRollout():
            return ("arm_reward", message.run_id, message.rollout_id)
    raise TypeError(f"not a request: {type(message).__name__}")


def _answers(reply: Reply) -> _Key:
    """What `reply` answers (as `_awaited` names it)."""
    match reply:
        case Score():
            return ("score", reply.run_id, reply.rollout_id)
        case Preference():
            return ("preference", reply.run_id, reply.comparison_id)
        case ArmReward():
            return ("arm_reward", reply.run_id, reply.rollout_id)
    raise TypeError(f"not a reply: {type(reply).__name__}")


def default_client_id(redis: Redis) -> str:
    """`<user>-<random>` for a client that logs in as a Redis ACL user (whose reply streams are
    `<namespace>:replies:<user>-*`), else `c-<random>`."""
    user = redis.connection_pool.connection_kwargs.get("username")
    prefix = user if isinstance(user, str) and _USER.fullmatch(user) else "c"
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def _read_block_ms(redis: Redis) -> int:
    """How long a blocking read of `redis` waits on the server: _BLOCK_MS, or less on a connection whose socket
    timeout would not wait for that (a read must not time out for blocking as asked)."""
    timeout = redis.connection_pool.connection_kwargs.get("socket_timeout")
    if not isinstance(timeout, int | float) or timeout <= 0:
        return _BLOCK_MS
    return max(1, min(_BLOCK_MS, int(timeout * 1000 / 2)))


class RubricdClient:
    def __init__(
        self,
        redis_url: str = "redis://127.0.0.1:6399/0",
        *,
        namespace: str = DEFAULT_NAMESPACE,
        client_id: str | None = None,
        timeout: float = 600.0,
        redis: Redis | None = None,
    ) -> None:
        self.keys = Keys(namespace)
        self.timeout = timeout
        self._owns_redis = redis is None
        # A blocking pool: a thousand concurrent score_one() calls wait for a
        # connection instead of failing with "Too many connections".
        self.redis = redis or Redis.from_pool(
            BlockingConnectionPool.from_url(
                redis_url, max_connections=64, timeout=None, socket_timeout=_SOCKET_TIMEOUT_S
            )
        )
        self._block_ms = _read_block_ms(self.redis)
        self.client_id = client_id or default_client_id(self.redis)
        self.reply_stream = self.keys.replies(self.client_id)
        self.rubrics = RubricView(self.redis, self.keys)
        # What waits for its reply, and where and how it was sent (published again after an outage).
        self._waiting: dict[_Key, asyncio.Future[Any]] = {}
        self._published: dict[_Key, tuple[str, bytes]] = {}
        self._closed: dict[str, set[int]] = {}  # run -> the steps this client closed (wait_for_rubrics waits on them)
        self._reader: asyncio.Task[None] | None = None
        self._closing = False
        self._unreachable_since: float | None = None  # when a call found Redis unreachable; None while it answers

    async def __aenter__(self) -> "RubricdClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def score(self, rollouts: Sequence[Rollout], *, timeout: float | None = None) -> list[Score]:
        """Publish every rollout at once and return their scores, in order.

        Raises InvalidRollout, before publishing any, if one breaks the schema
        (an id outside its alphabet, a negative step, ...) or a sample group's rollouts disagree on its size or
        outnumber it; ReplyTimeout if some get no score within `timeout` (default: the client's).
        """
        grouped(rollouts)
        return await self._request(rollouts, self.keys.rollouts, "rollout", "scored", timeout)

    async def compare(self, comparisons: Sequence[Comparison], *, timeout: float | None = None) -> list[Preference]:
        """Publish every comparison at once and return their Preferences, in order (pairwise judging).

        Raises InvalidRollout, before publishing any, if one breaks the schema; ReplyTimeout if some get no
        Preference within `timeout` (default: the client's).
        """
        return await self._request(comparisons, self.keys.comparisons, "comparison", "judged", timeout)

    async def compare_one(self, comparison: Comparison, *, timeout: float | None = None) -> Preference:
        return (await self.compare([comparison], timeout=timeout))[0]

    async def arm_rewards(self, rollouts: Sequence[ArmRollout], *, timeout: float | None = None) -> list[ArmReward]:
        """Publish every Rubric-ARM rollout at once and return their rewards, in order (the arm service's).

        Raises InvalidRollout, before publishing any, if one breaks the schema; ReplyTimeout if some get no
        reward within `timeout` (default: the client's).
        """
        return await self._request(rollouts, self.keys.arm, "arm rollout", "rewarded", timeout)

    async def _request(
        self,
        messages: Sequence[Request],
        stream: str,
        what: str,
        awaited: str,
        timeout: float | None,
    ) -> list[Any]:
        """Publish `messages` on `stream` at once, each with this client's reply stream, and return their replies
        in order; raise ReplyTimeout (the `what`s not `awaited`) if some do not arrive in time."""
        now = time.time()
        sent = [checked(msgspec.structs.replace(m, reply_to=self.reply_stream, published_at=now)) for m in messages]
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        self._ensure_reader()
        loop = asyncio.get_running_loop()
        keys = [_awaited(m) for m in messages]
        futures = [self._waiting.setdefault(k, loop.create_future()) for k in keys]
        for k, data in zip(keys, sent):
            self._published[k] = (stream, data)
        try:
            await self._retrying(lambda: self._publish(sent, stream), deadline, f"publishing {len(sent)} {what}(s)")
            done, pending = await asyncio.wait(set(futures), timeout=max(0.0, deadline - time.monotonic()))
        except _OUTAGE:
            done, pending = {f for f in futures if f.done()}, {f for f in futures if not f.done()}
        if pending:
            for k, f in zip(keys, futures):
                if f in pending:
                    self._waiting.pop(k, None)
                    self._published.pop(k, None)
            missing = [k[2] for k, f in zip(keys, futures) if f in pending]
            arrived = {k[2]: f.result() for k, f in zip(keys, futures) if f in done}
            raise ReplyTimeout(missing, limit, arrived, what, awaited)
        return [f.result() for f in futures]

    async def _publish(self, sent: Sequence[bytes], stream: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for data in sent:
                pipe.xadd(stream, {wire.FIELD: data})
            await pipe.execute()

    async def _publish_again(self) -> None:
        """Publish again what still waits for its reply (after an outage, which may have lost it)."""
        by_stream: dict[str, list[bytes]] = {}
        for stream, data in self._published.values():
            by_stream.setdefault(stream, []).append(data)
        for stream, sent in by_stream.items():
            await self._publish(sent, stream)
        if by_stream:
            log.info("published %d waiting messages again after the outage", len(self._published))

    async def _retrying(self, call: Callable[[], Awaitable[T]], deadline: float, doing: str) -> T:
        """`call()` (`doing` names it in logs), tried again while it fails for an outage or a slow Redis (with
        backoff while Redis is unreachable), until `deadline` (then its error)."""
        wait = _BACKOFF_S[0]
        while True:
            try:
                result = await call()
            except _OUTAGE as e:
                if self._closing or time.monotonic() + wait > deadline:
                    raise
                if await self._unreachable(e, doing):
                    await asyncio.sleep(wait)
                    wait = min(_BACKOFF_S[1], wait * 2)
                continue
            self._reachable()
            return result

    async def _unreachable(self, error: Exception, doing: str) -> bool:
        """Whether `error`, raised while `doing`, means Redis is unreachable (logged once per outage): a refused,
        reset or closed connection is; a read that timed out is only if a PING then gets no answer within
        _PING_TIMEOUT_S. Otherwise the read was slow (a busy Redis, a stalled event loop): logged at debug."""
        if isinstance(error, redis_errors.TimeoutError) and await self._answers():
            log.debug("%s timed out (%s), but Redis answers PING: slow, not unreachable; trying again", doing, error)
            return False
        if self._unreachable_since is None:
            self._unreachable_since = time.monotonic()
            log.warning("Redis unreachable (%s) while %s; trying again until it answers", error, doing)
        return True

    async def _answers(self) -> bool:
        """Whether Redis answers a PING within _PING_TIMEOUT_S (a PING whose read times out is sent again, so a
        socket timeout shorter than the bound does not decide it)."""
        deadline = time.monotonic() + _PING_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(self.redis.ping(), left)
                return True
            except redis_errors.TimeoutError:
                continue
            except _OUTAGE:  # refused, reset, or no answer within the bound (asyncio's TimeoutError)
                return False
        return False

    def _reachable(self) -> None:
        if self._unreachable_since is not None:
            log.warning("Redis reachable again after %.1f s", time.monotonic() - self._unreachable_since)
            self._unreachable_since = None

    async def score_one(self, rollout: Rollout, *, timeout: float | None = None) -> Score:
        return (await self.score([rollout], timeout=timeout))[0]

    async def close_step(
        self,
        run_id: str,
        step: int,
        rollouts: int | None = None,
        rollout_ids: Sequence[str] = (),
        *,
        part: int | None = None,
        parts: int | None = None,
        closer: str | None = None,
    ) -> None:
        """Say that every rollout of `step` has been published (`rollouts` of them).

        With `rollout_ids`, a step summarized at its deadline names the rollouts it missed. A trainer of several
        processes closes the step once per process, each with its own rollouts: `part` (its rank) of `parts`
        (the world size); the step is closed when every part is. A process that knows neither names itself
        (`closer`): the closers' closures add up (StepClosed).
        """
        count = rollouts if rollouts is not None else (len(rollout_ids) or None)
        closed = StepClosed(
            run_id=run_id,
            step=step,
            rollouts=count,
            rollout_ids=list(rollout_ids),
            closed_at=time.time(),
            part=part,
            parts=parts,
            closer=closer,
        )
        await self._retrying(
            lambda: self.redis.xadd(self.keys.steps, wire.entry(closed)),
            time.monotonic() + self.timeout,
            f"closing step {step} of run {run_id!r}",
        )
        self._closed.setdefault(run_id, set()).add(step)

    async def wait_for_rubrics(self, run_id: str, step: int, *, timeout: float | None = None) -> None:
        """Return once the rubric updates that follow `step`, and every earlier step this client closed, are in
        place: each of those steps has been through the loop, however the updates were ordered."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        wanted = {s for s in self._closed.get(run_id, ()) if s <= step} | {step}
        doing = f"waiting for the rubrics of run {run_id!r} step {step}"
        log = self.keys.rubric_step_log(run_id)
        last = await self._retrying(lambda: self._last_id(log), deadline, doing)
        while undone := await self._retrying(lambda: self.rubrics.undone(run_id, wanted), deadline, doing):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                steps = ", ".join(map(str, undone))
                raise TimeoutError(
                    f"rubrics for run {run_id!r} step {step} not in place after {limit:g} s (steps {steps})"
                )
            # Woken by the next step the updater completes for the run (its step log), or re-checks at least once
            # a block (an outage or a slow read: the next check retries, and tells which).
            with contextlib.suppress(*_OUTAGE):
                block_ms = max(1, min(int(remaining * 1000), self._block_ms))
                response = cast(_XRead, await self.redis.xread({log: last}, block=block_ms))
                for _, entries in response or []:
                    last = entries[-1][0]
        self._closed.get(run_id, set()).difference_update(wanted)  # in place: the next wait asks only for newer

    async def close(self) -> None:
        """Stop reading, delete this client's reply stream, release the connection."""
        self._closing = True
        if self._reader:
            # Not cancelled: redis-py can hang on a cancelled blocking XREAD. The
            # reader sees the flag within one block (_BLOCK_MS at most) and returns.
            await self._reader
            self._reader = None
        for future in self._waiting.values():
            future.cancel()
        self._waiting.clear()
        self._published.clear()
        with contextlib.suppress(*_OUTAGE):  # Redis down: the stream expires on its own (reply_ttl_s)
            await asyncio.wait_for(self.redis.delete(self.reply_stream), timeout=2)
        if self._owns_redis:
            await self.redis.aclose()

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read_replies(), name="rubricd-replies")

    async def _read_replies(self) -> None:
        last: bytes | str = "0-0"
        wait, lost = _BACKOFF_S[0], False
        doing = f"reading replies on {self.reply_stream}"
        while not self._closing:
            try:
                response = cast(
                    _XRead, await self.redis.xread({self.reply_stream: last}, count=1000, block=self._block_ms)
                )
                if lost:  # back: what was in flight may be lost with the outage, so publish it again
                    await self._publish_again()
                    wait, lost = _BACKOFF_S[0], False
                self._reachable()
            except _OUTAGE as e:
                # A slow read is read again from `last` at once: XREAD without a group loses nothing.
                if await self._unreachable(e, doing):
                    lost = True
                    await asyncio.sleep(wait)
                    wait = min(_BACKOFF_S[1], wait * 2)
                continue
            for _, entries in response or []:
                for entry_id, fields in entries:
                    try:
                        self._deliver(_reply_decoder.decode(wire.payload(fields)))
                    except msgspec.DecodeError as e:  # no reply this client knows: nobody waits for it
                        log.warning("ignored reply %s on %s: %s", entry_id, self.reply_stream, e)
                last = entries[-1][0]
                # Read replies are ours alone: drop them so the stream stays small.
                with contextlib.suppress(*_OUTAGE):
                    await self.redis.xdel(self.reply_stream, *(e[0] for e in entries))

    def _deliver(self, reply: Reply) -> None:
        key = _answers(reply)
        self._published.pop(key, None)
        future = self._waiting.pop(key, None)
        if future is not None and not future.done():
            future.set_result(reply)

    async def _last_id(self, stream: str) -> bytes | str:
        newest = cast(_Entries | None, await self.redis.xrevrange(stream, count=1))
        return newest[0][0] if newest else "0-0"


class SyncRubricdClient:
    """RubricdClient for synchronous code: its event loop runs in a daemon thread.

    Safe to call from many threads at once (e.g. a reward manager that scores
    samples concurrently): every call is handed to the one loop.
    """

    def __init__(self, redis_url: str = "redis://127.0.0.1:6399/0", **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rubricd-client", daemon=True)
        self._thread.start()
        self._client = self._run(self._make(redis_url, kwargs))

    async def _make(self, redis_url: str, kwargs: dict[str, Any]) -> RubricdClient:
        return RubricdClient(redis_url, **kwargs)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coro` on this client's loop: `.result()` waits for it, `asyncio.wrap_future` awaits it from any loop."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    @property
    def aio(self) -> RubricdClient:
        """The async client behind this one; use it only in coroutines handed to `submit`."""
        return self._client

    @property
    def reply_stream(self) -> str:
        return self._client.reply_stream

    def score(self, rollouts: Sequence[Rollout], *, timeout: float | None = None) -> list[Score]:
        return self._run(self._client.score(rollouts, timeout=timeout))

    def score_one(self, rollout: Rollout, *, timeout: float | None = None) -> Score:
        return self._run(self._client.score_one(rollout, timeout=timeout))

    def compare(self, comparisons: Sequence[Comparison], *, timeout: float | None = None) -> list[Preference]:
        return self._run(self._client.compare(comparisons, timeout=timeout))

    def compare_one(self, comparison: Comparison, *, timeout: float | None = None) -> Preference:
        return self._run(self._client.compare_one(comparison, timeout=timeout))

    def arm_rewards(self, rollouts: Sequence[ArmRollout], *, timeout: float | None = None) -> list[ArmReward]:
        return self._run(self._client.arm_rewards(rollouts, timeout=timeout))

    def close_step(
        self,
        run_id: str,
        step: int,
        rollouts: int | None = None,
        rollout_ids: Sequence[str] = (),
        *,
        part: int | None = None,
        parts: int | None = None,
        closer: str | None = None,
    ) -> None:
        self._run(self._client.close_step(run_id, step, rollouts, rollout_ids, part=part, parts=parts, closer=closer))

    def wait_for_rubrics(self, run_id: str, step: int, *, timeout: float | None = None) -> None:
        self._run(self._client.wait_for_rubrics(run_id, step, timeout=timeout))

    def close(self) -> None:
        """Close the client (its reply stream is deleted), then its event loop and thread."""
        if self._loop.is_running():
            self._run(self._client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> "SyncRubricdClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
