"""The template every service is a copy of: its clients, its subscriptions, its chores, `run`.

A service's `create_app` reads as: its settings, the clients it needs, its subscriptions (`consume`, `listen`,
`every`); `ServiceApp` does the rest the same way for every service: consumer pairs with reclaim and keep-alive
(runtime.ledger), failure records and dead letters, outages, the lifespan, /health and /metrics.
The details: docs/development.md, "Layout" (the service template), and docs/operators/recover.md, "Delivery".
"""

import asyncio
import contextlib
import logging
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import msgspec
from faststream import FastStream
from faststream.asgi import make_ping_asgi
from faststream.middlewares import AckPolicy
from faststream.redis import RedisBroker, StreamSub
from faststream.redis.message import RedisStreamMessage
from prometheus_client import make_asgi_app
from redis.asyncio import BlockingConnectionPool, Redis

from rubricd.keys import Keys
from rubricd.messages import EventKind
from rubricd_services.llm import LLMClient
from rubricd_services.memory.embedder import EMBEDDER, make_embedder
from rubricd_services.memory.store import Memory
from rubricd_services.runtime import consumer_groups, dead_letters, events, intake
from rubricd_services.runtime.events import Events
from rubricd_services.runtime.ledger import Ledger
from rubricd_services.runtime.logs import configure_logging
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.outage import LLM, REDIS, WEAVIATE, Outages, QuietOutages
from rubricd_services.settings import ServiceSettings, load

W = TypeVar("W")
S = TypeVar("S", bound=ServiceSettings)
Handler = Callable[[W, RedisStreamMessage], Awaitable[None]]

CONSUMER_GROUPS_INTERVAL_S = 5.0  # how often each consumer group's pending and lag are read for the metrics
FAILURE_TTL_S = 86_400  # how long an entry's last error is kept for its dead letter
# A handler's argument: the message itself (intake.itself); Any, so that FastStream neither injects nor converts it.
Entry = Any
log = logging.getLogger("rubricd.service")
EXIT_GROUP_GONE = 3  # run()'s exit code when the service stopped because Redis lost one of its consumer groups


class DeadlineExceeded(Exception):
    """A handler ran past its deadline: a failure of the entry's own, retried by a reclaim."""


@dataclass
class Clients:
    """What a service's worker is made with, opened in the lifespan and closed on shutdown."""

    redis: Redis
    llm: LLMClient
    metrics: Metrics
    keys: Keys
    consumer: str  # this process's name in its consumer groups
    outages: Outages  # a worker's background tasks report outages here too
    events: Events  # the events stream, as this service writes it
    memory_: Memory | None = None

    @property
    def memory(self) -> Memory:
        if self.memory_ is None:
            raise RuntimeError("this service was built without memory (ServiceApp(..., memory=True))")
        return self.memory_


class WiredApp(FastStream):
    """A service's app: FastStream's, with its wiring (`run` reads why it stopped by itself, if it did)."""

    def __init__(self, wiring: "ServiceApp[Any]", *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wiring = wiring


class ServiceApp(Generic[W]):
    """One service's wiring; `W` is its worker (Scorer, Analyzer, ...)."""

    def __init__(
        self,
        name: str,
        settings: ServiceSettings,
        metrics: Metrics | None = None,
        *,
        agents: Sequence[str] = (),
        memory: bool = False,
    ) -> None:
        self.name, self.settings = name, settings
        self.agents, self.with_memory = list(agents), memory
        self.keys = Keys(settings.namespace)
        self.consumer = consumer_name(settings)
        self.metrics = metrics or Metrics(name)
        self.broker = make_broker(settings, self.metrics)
        self.consumer_groups: list[tuple[str, str]] = []
        self.deadlines: dict[str, float] = {}  # per consumed stream: how long its handler may take
        self.outages = Outages(name)
        self._chores: list[tuple[float, Callable[[W], Awaitable[None]]]] = []
        self._shutdown: list[Callable[[W], Awaitable[None]]] = []
        self._trimmed: list[str] = []
        self._listened: list[tuple[str, Handler[W]]] = []
        self.ledger = Ledger(name)
        self.stopped_for: list[str] = []  # why the service stopped by itself, if it did (a consumer group gone)
        self._worker: W | None = None
        self._clients: Clients | None = None

    @property
    def reclaimer(self) -> str:
        """This process's name as the consumer of reclaimed entries."""
        return f"{self.consumer}-reclaim"

    @property
    def worker(self) -> W:
        if self._worker is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._worker

    @property
    def clients(self) -> Clients:
        if self._clients is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._clients

    def consume(
        self,
        stream: str,
        consumer_group: str,
        handle: Handler[W],
        *,
        agents: Sequence[str] = (),
        on_give_up: Handler[W] | None = None,
        trim: bool = False,
    ) -> None:
        """The consumer pair on `stream`'s `consumer_group`; `on_give_up` runs before an entry is dead-lettered.

        `agents`: those the handler calls, one after another, for its deadline. With `trim`, the stream is trimmed
        every `trim_interval_s` below what every consumer group has acked: for the streams trainers write (rollouts,
        steps), which no MAXLEN bounds.
        """
        s = self.settings
        self.consumer_groups.append((stream, consumer_group))
        self.deadlines[stream] = deadline = s.handler_deadline(agents)
        # What a handler that succeeded has found answering (the LLM endpoint and the memory only if it calls them).
        answered = (REDIS, *((LLM, WEAVIATE) if agents and self.with_memory else (LLM,) if agents else ()))
        if trim:
            self._trimmed.append(stream)

        @self.broker.subscriber(
            stream=StreamSub(stream, group=consumer_group, consumer=self.consumer, max_records=s.max_records),
            max_workers=s.max_in_flight,
            ack_policy=AckPolicy.MANUAL,
            parser=intake.parse_entry,
            decoder=intake.itself,
        )
        async def fresh(msg: Entry) -> None:
            with self.ledger.working_on(self.consumer, intake.entry_id(msg)):
                await self._handle(handle, msg, deadline, answered)

        @self.broker.subscriber(
            stream=StreamSub(stream, group=consumer_group, consumer=self.reclaimer, min_idle_time=s.reclaim_idle_ms),
            max_workers=max(1, s.max_in_flight // 4),
            ack_policy=AckPolicy.MANUAL,
            parser=intake.parse_entry,
            decoder=intake.itself,
        )
        async def reclaimed(msg: Entry) -> None:
            with self.ledger.working_on(self.reclaimer, intake.entry_id(msg)):
                spent = await self._spent(msg)
                if spent is None:
                    await self._handle(handle, msg, deadline, answered)
                    return
                if on_give_up is not None:
                    await on_give_up(self.worker, msg)
                await self._dead_letter(msg, *spent)

    def listen(self, stream: str, handle: Handler[W]) -> None:
        """Every entry of `stream` added after the service started, in every process (no group, no ack)."""
        self._listened.append((stream, handle))

    def _subscribe_listener(self, stream: str, handle: Handler[W], start_id: str) -> None:
        """The listener on `stream`, reading on from `start_id` (then from the last entry it read): never from
        `$`, whose reads, until a first entry arrives, miss what is added between two of them."""

        @self.broker.subscriber(
            stream=StreamSub(stream, last_id=start_id), parser=intake.parse_entry, decoder=intake.itself
        )
        async def listener(msg: Entry) -> None:
            try:
                if intake.MALFORMED in msg.headers:
                    raise intake.Rejected(msg.headers[intake.MALFORMED])
                await handle(self.worker, msg)
            except (intake.Rejected, msgspec.DecodeError) as e:  # bad input: one line, no traceback
                log.warning("%s: skipped entry %s of %s: %s", self.name, intake.entry_id(msg).decode(), stream, e)
            except Exception as e:
                if not self.outages.down(f"reading {stream}", e):
                    raise

    def every(self, interval_s: float, chore: Callable[[W], Awaitable[None]]) -> None:
        """Run `chore(worker)` every `interval_s` while the service runs."""
        self._chores.append((interval_s, chore))

    def on_shutdown(self, stop: Callable[[W], Awaitable[None]]) -> None:
        """Run `stop(worker)` on shutdown, before the clients close."""
        self._shutdown.append(stop)

    def build(self, make_worker: Callable[[Clients], W], **started: object) -> FastStream:
        """The app; `started` adds fields to the service_started event."""

        async def announce() -> None:
            fields = {
                "consumer": self.consumer,
                "max_in_flight": self.settings.max_in_flight,
                "handler_deadline_s": ", ".join(f"{stream} {s:g}" for stream, s in self.deadlines.items()),
                **started,
            }
            await self.clients.events.publish(events.event(self.name, EventKind.SERVICE_STARTED, **fields))

        return WiredApp(self, self.broker, lifespan=lambda: self._lifespan(make_worker), after_startup=[announce])

    @contextlib.asynccontextmanager
    async def _lifespan(self, make_worker: Callable[[Clients], W]) -> AsyncIterator[None]:
        s = self.settings
        async with contextlib.AsyncExitStack() as stack:
            redis = make_redis(s)
            stack.push_async_callback(redis.aclose)
            # Redis answers before start-up ends: a failure here stops the process (its orchestrator starts it
            # again); after start-up, uvicorn would keep the listener up answering 500 to every probe.
            await redis.ping()
            llm = LLMClient.from_settings(s, self.agents, redis)
            stack.push_async_callback(llm.aclose)
            for agent, mode in (await llm.detect(a for a in self.agents if a != EMBEDDER)).items():
                log.info("%s: agent %s speaks output_mode %s", self.name, agent, mode)
            self.metrics.watch_llm(llm, s.prices, {agent: s.agent(agent).model for agent in self.agents})
            memory = await Memory.connect(s, make_embedder(s, llm)) if self.with_memory else None
            if memory is not None:
                stack.push_async_callback(memory.close)
            # Created at 0, not $: entries published before the service first ran are handled too.
            for stream, group in self.consumer_groups:
                await consumer_groups.ensure_group(redis, stream, group)
            # Listeners start after the stream's last entry now, before the worker reads what they keep fresh.
            for stream, handle in self._listened:
                self._subscribe_listener(stream, handle, await last_entry_id(redis, stream))
            events_ = Events(redis, self.keys, s.stream_maxlen)
            self._clients = Clients(redis, llm, self.metrics, self.keys, self.consumer, self.outages, events_, memory)
            self.ledger.watch(await self.broker.connect(), fresh=self.consumer, reclaimed=self.reclaimer)
            quiet = QuietOutages(self.outages, self._group_gone)
            broker_log = logging.getLogger("rubricd.broker")
            broker_log.addFilter(quiet)
            stack.callback(broker_log.removeFilter, quiet)
            self._worker = worker = make_worker(self._clients)
            tasks = [asyncio.create_task(self._repeat(s.reclaim_idle_ms / 4000, self._keep_claimed))]
            # The backlog gauges from the start, not only after the first interval.
            tasks.append(
                asyncio.create_task(self._repeat(CONSUMER_GROUPS_INTERVAL_S, self._read_consumer_groups, now=True))
            )
            tasks += [asyncio.create_task(self._repeat(interval, chore)) for interval, chore in self._chores]
            if self._trimmed:
                tasks.append(asyncio.create_task(self._repeat(s.trim_interval_s, self._trim)))
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                for stop in self._shutdown:
                    await stop(worker)

    def _group_gone(self, error: BaseException) -> None:
        """FastStream found a group of ours gone (Redis lost its data: a FLUSHALL, a restart without persistence)
        and stops the service: started again, by its orchestrator, it makes its groups again."""
        found = re.search(r"group `(.+?)` for stream `(.+?)`", str(error))
        group = f"group {found[1]} of {found[2]}" if found else str(error)
        if not self.stopped_for:
            log.warning(
                "%s: consumer %s is gone: Redis lost its data (a FLUSHALL, or a restart without persistence); "
                "stopping with exit code %d, to be started again, which makes it again",
                *(self.name, group, EXIT_GROUP_GONE),
            )
        self.stopped_for.append(group)

    async def _read_consumer_groups(self, _: W) -> None:
        await self.metrics.read_consumer_groups(self.clients.redis, self.consumer_groups)

    async def _trim(self, _: W) -> None:
        for stream in self._trimmed:
            await consumer_groups.trim_consumed(self.clients.redis, stream)

    async def _keep_claimed(self, _: W) -> None:
        """Keep the entries in hand from going idle (with none, a PING: this is also the heartbeat that says Redis
        is back); one held past twice its handler's deadline is let go, to a reclaim."""
        too_old = time.monotonic() - 2 * max(self.deadlines.values(), default=0.0)
        await self.ledger.keep(self.clients.redis, self.consumer_groups, too_old)
        await self._answered(REDIS)

    async def _handle(
        self, handle: Handler[W], msg: RedisStreamMessage, deadline_s: float, answered: Sequence[str]
    ) -> None:
        try:
            if len(msg.body) > self.settings.max_entry_bytes:
                raise intake.Rejected(
                    f"oversized entry: {len(msg.body)} bytes > max_entry_bytes={self.settings.max_entry_bytes}"
                )
            if intake.MALFORMED in msg.headers:
                raise intake.Rejected(msg.headers[intake.MALFORMED])
            try:
                async with asyncio.timeout(deadline_s) as deadline:
                    await handle(self.worker, msg)
            except TimeoutError:
                if deadline.expired():  # ours (a shutdown's cancel at the same moment stays a cancel)
                    ran_past = f"the handler ran past its deadline (handler_deadline_s={deadline_s:g})"
                    raise DeadlineExceeded(ran_past) from None
                raise
        except intake.Rejected as e:
            await self._dead_letter(msg, str(e), notify=e.notify)
        except Exception as e:
            # Left pending: once idle, a reclaiming consumer retries it; the record says whether it counts against it.
            outage = self.outages.down(
                f"handling entry {intake.entry_id(msg).decode()} of {msg.raw_message['channel']}", e
            )
            with contextlib.suppress(Exception):
                key = self._failure_key(msg)
                async with self.clients.redis.pipeline(transaction=True) as pipe:
                    pipe.hset(key, "error", repr(e)[: dead_letters.MAX_REASON_CHARS])
                    pipe.hincrby(key, "transient" if outage else "failed", 1)
                    pipe.expire(key, FAILURE_TTL_S)
                    await pipe.execute()
            if not outage:
                raise  # FastStream logs it, with its traceback
        else:
            await self._answered(*answered)

    async def _answered(self, *names: str) -> None:
        """`names` answered; once Redis is back, idle connections from before the outage (closed at Redis's end)
        are dropped, so no command meets one."""
        if REDIS in self.outages.up(*names):
            for client in (self.clients.redis, await self.broker.connect()):
                await client.connection_pool.disconnect(inuse_connections=False)

    async def _spent(self, msg: RedisStreamMessage) -> tuple[str, int] | None:
        """Why a reclaimed entry is given up on, and its deliveries; None to handle it again."""
        s = self.settings
        record = cast(dict[bytes, bytes], await self.clients.redis.hgetall(self._failure_key(msg)))
        failed, outages = int(record.get(b"failed", 0)), int(record.get(b"transient", 0))
        deliveries = await msg.get_delivery_count()
        died = deliveries - 1 - failed - outages  # deliveries to consumers that died before recording anything
        if failed >= s.max_failures:
            reason = f"failed {failed} of {deliveries} deliveries (max_failures={s.max_failures})"
        elif died >= s.max_redeliveries:
            reason = (
                f"{died} of {deliveries} deliveries ended with their consumer (max_redeliveries={s.max_redeliveries})"
            )
        else:
            return None
        if b"error" in record:
            reason += f"; last error: {record[b'error'].decode(errors='replace')}"
        return reason, deliveries

    async def _dead_letter(
        self, msg: RedisStreamMessage, reason: str, deliveries: int = 1, notify: intake.Notice | None = None
    ) -> None:
        await dead_letters.dead_letter(
            self.clients.redis,
            self.keys,
            msg,
            service=self.name,
            reason=reason,
            deliveries=deliveries,
            maxlen=self.settings.dead_letter_maxlen,
            events_maxlen=self.settings.stream_maxlen,
            max_payload=self.settings.dead_letter_max_bytes,
            notify=notify,
        )

    def _failure_key(self, msg: RedisStreamMessage) -> str:
        return self.keys.failure(msg.raw_message["channel"], intake.entry_id(msg).decode())

    async def _repeat(self, interval_s: float, chore: Callable[[W], Awaitable[None]], now: bool = False) -> None:
        """`chore` every `interval_s` (`now`: first at once); a failure is logged and tried again next time."""
        while True:
            if not now:
                await asyncio.sleep(interval_s)
            now = False
            name = getattr(chore, "__qualname__", chore)
            try:
                await chore(self.worker)
            except Exception as e:
                if not self.outages.down(str(name), e):
                    log.exception("%s: %s failed", self.name, name)


async def last_entry_id(redis: Redis, stream: str) -> str:
    """The id of `stream`'s last entry; 0-0 if it has none yet (everything added later is new)."""
    last = await redis.xrevrange(stream, count=1)
    return cast(bytes, last[0][0]).decode() if last else "0-0"


def consumer_name(settings: ServiceSettings) -> str:
    """This process's name in its consumer groups: the setting, or host-pid."""
    return settings.consumer or f"{socket.gethostname()}-{os.getpid()}"


def make_broker(settings: ServiceSettings, metrics: Metrics) -> RedisBroker:
    # Per-message logs at DEBUG: at INFO FastStream would log every entry received. Its logger is
    # ours (no handler of its own), so its lines are formatted and redacted like every other.
    return RedisBroker(
        settings.redis_url,
        max_connections=settings.redis_max_connections,
        graceful_timeout=settings.graceful_timeout_s,
        log_level=logging.DEBUG,
        logger=logging.getLogger("rubricd.broker"),
        middlewares=[metrics.middleware],
    )


def make_redis(settings: ServiceSettings) -> Redis:
    """The service's own client for its scripts and writes: a blocking pool, so bursts wait for a connection."""
    pool = BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.redis_max_connections,
        timeout=None,
    )
    return Redis.from_pool(pool)


def run(name: str, settings_type: type[S], create_app: Callable[[S, Metrics], FastStream]) -> None:
    """Load settings, configure logging, build the app with its metrics, and run it until SIGTERM/SIGINT."""
    settings = load(settings_type)
    configure_logging(settings)
    metrics = Metrics(name)
    service = create_app(settings, metrics)
    app: Any = service
    options: dict[str, str | int | None] = {}
    if settings.metrics_port is not None:
        routes = [("/health", make_ping_asgi(app.broker, timeout=5.0)), ("/metrics", make_asgi_app(metrics.registry))]
        app = app.as_asgi(asgi_routes=routes)
        # log_config=None: uvicorn logs through our handler (JSON, redacted) instead of its own.
        options = {
            "host": settings.metrics_host,
            "port": settings.metrics_port,
            "access_log": "false",
            "log_config": None,
        }
    asyncio.run(app.run(log_level=logging.INFO, run_extra_options=options))
    if isinstance(service, WiredApp) and service.wiring.stopped_for:
        sys.exit(EXIT_GROUP_GONE)
