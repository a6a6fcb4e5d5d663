"""What counts as an outage (retried without spending an entry's deliveries) and what as the entry's own failure."""

import msgspec
import redis.exceptions
import weaviate.exceptions

from common.llm import LLMError
from common.streams import Rejected, transient


class AnalysisFailed(Exception):
    pass


def caused(outer: Exception, cause: BaseException) -> Exception:
    try:
        raise outer from cause
    except Exception as e:
        return e


def test_outages_of_redis_weaviate_and_the_endpoint_are_transient_even_when_wrapped():
    for outage in (
        redis.exceptions.ConnectionError("Connection closed by server."),
        redis.exceptions.TimeoutError("Timeout reading from socket"),
        weaviate.exceptions.WeaviateConnectionError("no connection"),
        LLMError("analyzer", 4, "cannot connect to http://127.0.0.1:9/v1", transient=True),
    ):
        assert transient(outage)
        assert transient(caused(AnalysisFailed("the analyst gave no answer"), outage))


def test_an_entrys_own_failures_are_not():
    for own in (
        msgspec.ValidationError("Expected `int`, got `str` - at `$.step`"),
        redis.exceptions.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        LLMError("analyzer", 1, "HTTP 400: bad request"),
        Rejected("malformed rollout"),
        caused(AnalysisFailed("invalid output"), LLMError("analyzer", 4, "invalid output")),
    ):
        assert not transient(own)
