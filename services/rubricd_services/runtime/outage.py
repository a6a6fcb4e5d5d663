"""Outages of what a service depends on (Redis, Weaviate, the LLM endpoint), logged as one line each way.

A Redis restart makes every handler, chore and FastStream fetch loop of a
service fail at once, and keep failing until it is back. None of that is a bug:
`Outages` logs one warning when a dependency is first seen down (the service,
what it was doing, the error) and one when it answers again, and nothing in
between; `QuietOutages`, a filter on FastStream's logger, folds its fetch-loop
and handler tracebacks for outages into the same lines. Real bugs keep their
tracebacks.
"""

import asyncio
import logging
import time
from collections.abc import Callable

import redis.exceptions
import weaviate.exceptions
from faststream.redis.exceptions import StreamGroupNotFoundError

log = logging.getLogger("rubricd.outage")
# A dependency is back once it answered with no failure seen for this long: a Redis shutting down answers a new
# connection while its old ones are already closed, and that is one outage, not two.
QUIET_S = 1.0

REDIS, WEAVIATE, LLM = "Redis", "Weaviate", "the LLM endpoint"
_DEPENDENCIES: tuple[tuple[str, tuple[type[BaseException], ...]], ...] = (
    (
        REDIS,
        (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.BusyLoadingError),
    ),
    (
        WEAVIATE,
        (
            weaviate.exceptions.WeaviateConnectionError,
            weaviate.exceptions.WeaviateTimeoutError,
            weaviate.exceptions.WeaviateGRPCUnavailableError,
            weaviate.exceptions.WeaviateClosedClientError,
        ),
    ),
)


def dependency(error: BaseException) -> str | None:
    """Whose outage `error` (or what caused it) is, or None when it is no outage: an error of the work itself.

    An LLMError (or anything) with `transient = True` is the LLM endpoint's (unreachable, timed out, overloaded).
    """
    seen: BaseException | None = error
    while seen is not None:
        for name, kinds in _DEPENDENCIES:
            if isinstance(seen, kinds):
                return name
        if getattr(seen, "transient", False) is True:
            return LLM
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None


class Outages:
    """One service's view of its dependencies: down since when, logged once each way."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._since: dict[str, float] = {}  # dependency -> when first seen down
        self._failed: dict[str, float] = {}  # dependency -> when last seen failing

    def down(self, doing: str, error: BaseException) -> bool:
        """Note a failure while `doing`; True if it was an outage (logged if it is a new one), False if not."""
        name = dependency(error)
        if name is None:
            return False
        self._failed[name] = now = time.monotonic()
        if name not in self._since:
            self._since[name] = now
            log.warning(
                "%s: %s is unreachable (%s, while %s); retrying until it is back",
                self.service,
                name,
                _short(error),
                doing,
            )
        return True

    def up(self, *names: str) -> list[str]:
        """`names` (default: all) answered: back, once no failure was seen for QUIET_S; returns those back now."""
        now, back = time.monotonic(), []
        for name in names or list(self._since):
            if name in self._since and now - self._failed[name] >= QUIET_S:
                log.warning("%s: %s is back after %.1f s", self.service, name, now - self._since.pop(name))
                back.append(name)
        return back

    def is_down(self, name: str) -> bool:
        return name in self._since


class QuietOutages(logging.Filter):
    """On FastStream's logger: a record carrying an outage (a fetch error, a handler's) goes to `outages` instead
    of the log, and a handler cancelled at shutdown is not a traceback (the template says so once)."""

    def __init__(self, outages: Outages, group_gone: Callable[[BaseException], None]) -> None:
        super().__init__()
        self.outages = outages
        self.group_gone = group_gone

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            return True
        if isinstance(error, asyncio.CancelledError) or _unblocked(error):
            return False
        if isinstance(error, StreamGroupNotFoundError):
            self.group_gone(error)
            return False
        doing = "reading its streams" if record.getMessage() == "Message fetch error" else "handling an entry"
        return not self.outages.down(doing, error)


def _unblocked(error: BaseException) -> bool:
    """A blocked read's stream was deleted (Redis lost its data): the next read finds its group gone."""
    return isinstance(error, redis.exceptions.ResponseError) and str(error).startswith("UNBLOCKED")


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 300 else text[:299] + "…"
