"""What every service's wiring shares: its consumer name, broker, Redis client, start event, logging and `run`.

A service's app.py keeps what is its own (subscribers, lifespan, domain);
`run` does the rest: settings (a bad one stops the service, named), logging,
metrics, and, with RUBRICD_METRICS_PORT set, an HTTP listener serving
/health (the broker's ping: 204 or 500) and /metrics (Prometheus).
"""

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Callable

from faststream import FastStream
from faststream.asgi import make_ping_asgi
from faststream.redis import RedisBroker
from prometheus_client import make_asgi_app
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter
from redis.asyncio import BlockingConnectionPool, Redis

from rubricd import wire
from rubricd.keys import Keys

from . import streams
from .llm import redact
from .metrics import Metrics
from .settings import ServiceSettings, load

# Libraries that log a line per request at INFO.
_NOISY = ("httpx", "httpx2", "openai", "uvicorn.access")


def consumer_name(settings: ServiceSettings) -> str:
    """This process's name in its consumer groups: the setting, or host-pid."""
    return settings.consumer or f"{socket.gethostname()}-{os.getpid()}"


def make_broker(settings: ServiceSettings, metrics: Metrics) -> RedisBroker:
    # Per-message logs at DEBUG: at INFO FastStream would log every entry received. Its logger is
    # ours (no handler of its own), so its lines are formatted and redacted like every other.
    return RedisBroker(settings.redis_url, max_connections=settings.redis_max_connections, log_level=logging.DEBUG,
                       logger=logging.getLogger("rubricd.broker"), middlewares=[metrics.middleware])  # fmt: skip


def make_redis(settings: ServiceSettings) -> Redis:
    """The service's own client for its scripts and writes: a blocking pool, so bursts wait for a connection."""
    pool = BlockingConnectionPool.from_url(settings.redis_url, max_connections=settings.redis_max_connections, timeout=None)
    return Redis.from_pool(pool)


async def announce_started(redis: Redis, keys: Keys, service: str, maxlen: int, **fields: object) -> None:
    """Say the subscribers are reading (tests, `rubricd tail` and operators wait for this)."""
    started = streams.event(service, "service_started", **fields)
    await redis.xadd(keys.events, wire.entry(started), maxlen=maxlen, approximate=True)


class Redacted(logging.Formatter):
    """Formats with `inner`, then masks secrets in the whole line, tracebacks included:
    configured API keys, key-like words and passwords in URLs."""

    def __init__(self, inner: logging.Formatter, secrets: list[str]) -> None:
        super().__init__()
        self.inner, self.secrets = inner, secrets

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), *self.secrets)


def configure_logging(settings: ServiceSettings) -> None:
    """One JSON object per line (RUBRICD_LOG_FORMAT=text for humans), secrets masked, on stderr."""
    if settings.log_format == "json":
        inner: logging.Formatter = JsonFormatter("{asctime}{levelname}{name}{message}", style="{",
                                                 rename_fields={"levelname": "level", "name": "logger"},
                                                 reserved_attrs=[*RESERVED_ATTRS, "color_message"])  # fmt: skip
    else:
        inner = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    secrets = [settings.llm.api_key.get_secret_value(), *(settings.agent(a).api_key.get_secret_value() for a in settings.agents)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Redacted(inner, secrets))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)
    # FastStream's logger has a coloured handler of its own: send its lines through ours.
    faststream_logger = logging.getLogger("faststream")
    faststream_logger.handlers.clear()
    faststream_logger.propagate = True
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run(service: str, settings_type: type[ServiceSettings], create_app: Callable[..., FastStream]) -> None:
    """Load settings, configure logging, build the app with its metrics, and run it until SIGTERM/SIGINT."""
    settings = load(settings_type)
    configure_logging(settings)
    metrics = Metrics(service)
    app = create_app(settings, metrics)
    options: dict[str, str | int | None] = {}
    if settings.metrics_port is not None:
        routes = [("/health", make_ping_asgi(app.broker, timeout=5.0)), ("/metrics", make_asgi_app(metrics.registry))]
        app = app.as_asgi(asgi_routes=routes)
        # log_config=None: uvicorn logs through our handler (JSON, redacted) instead of its own.
        options = {"host": settings.metrics_host, "port": settings.metrics_port, "access_log": "false", "log_config": None}
    asyncio.run(app.run(log_level=logging.INFO, run_extra_options=options))
