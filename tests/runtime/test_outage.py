"""What counts as an outage, and of what (retried without spending an entry's deliveries, logged once), and what
as the entry's own failure."""

import asyncio
import logging
import time

import msgspec
import redis.exceptions
import weaviate.exceptions

from rubricd_services.llm import LLMError
from rubricd_services.runtime.intake import Rejected
from rubricd_services.runtime.outage import LLM, QUIET_S, REDIS, WEAVIATE, Outages, QuietOutages, dependency


class AnalysisFailed(Exception):
    pass


def caused(outer: Exception, cause: BaseException) -> Exception:
    try:
        raise outer from cause
    except Exception as e:
        return e


def test_outages_of_redis_weaviate_and_the_endpoint_are_named_even_when_wrapped():
    for outage, of in (
        (redis.exceptions.ConnectionError("Connection closed by server."), REDIS),
        (redis.exceptions.TimeoutError("Timeout reading from socket"), REDIS),
        (weaviate.exceptions.WeaviateConnectionError("no connection"), WEAVIATE),
        (LLMError("analyzer", 4, "cannot connect to http://127.0.0.1:9/v1", transient=True), LLM),
    ):
        assert dependency(outage) == of
        assert dependency(caused(AnalysisFailed("the analyst gave no answer"), outage)) == of


def test_an_entrys_own_failures_are_not():
    for own in (
        msgspec.ValidationError("Expected `int`, got `str` - at `$.step`"),
        redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        LLMError("analyzer", 1, "HTTP 400: bad request"),
        Rejected("malformed rollout"),
        caused(AnalysisFailed("invalid output"), LLMError("analyzer", 4, "invalid output")),
    ):
        assert dependency(own) is None


def test_an_outage_is_one_line_when_first_seen_and_one_when_over(caplog):
    outages = Outages("analyzer")
    with caplog.at_level(logging.WARNING, "rubricd.outage"):
        for doing in ("reading its streams", "handling entry 1-0 of scored", "its chore _trim"):
            assert outages.down(doing, redis.exceptions.ConnectionError("Connection refused"))
        assert not outages.down("handling entry 2-0 of scored", ValueError("a bug"))  # not an outage: not logged
        outages.up(REDIS)  # too soon after the last failure: a Redis shutting down may still answer one call
        assert outages.is_down(REDIS)
        time.sleep(QUIET_S)
        outages.up(REDIS)
        outages.up(REDIS)
    assert [r.getMessage() for r in caplog.records] == [
        "analyzer: Redis is unreachable (ConnectionError: Connection refused, while reading its streams); "
        "retrying until it is back",
        caplog.records[1].getMessage(),
    ]
    assert caplog.records[1].getMessage().startswith("analyzer: Redis is back after ")


def test_faststreams_records_of_outages_and_cancellations_are_folded_real_errors_kept():
    outages = Outages("scorer")
    quiet = QuietOutages(outages, lambda error: None)

    def record(message: str, error: BaseException | None) -> logging.LogRecord:
        exc_info = (type(error), error, None) if error else None
        return logging.LogRecord("rubricd.broker", logging.ERROR, __file__, 1, message, (), exc_info)

    assert not quiet.filter(record("Message fetch error", redis.exceptions.ConnectionError("reset")))
    assert outages.is_down(REDIS)
    assert not quiet.filter(record("CancelledError: ", asyncio.CancelledError()))
    assert quiet.filter(record("KeyError: 'score'", KeyError("score")))
    assert quiet.filter(record("Received", None))
