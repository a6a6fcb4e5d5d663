"""A service's Prometheus metrics: FastStream's own, the LLM client's, its backlog, and its domain's.

One registry per service: FastStream's per-stream middleware metrics, the LLM client's usage and cost per
agent (read when scraped), each read group's pending and lag (refreshed in the background), and what the
service declares with `counter`, `histogram`, `gauge`. `runtime.service.run` serves it on /metrics.
The metrics: docs/operators/observe.md, "Metrics and health".
"""

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence

from faststream.redis.prometheus import RedisPrometheusMiddleware
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rubricd_services.llm import LLMClient
from rubricd_services.runtime.status import group_lag
from rubricd_services.settings import Price

log = logging.getLogger("rubricd.metrics")


class Metrics:
    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, RSS: what capacity.md's costs are in
        self.middleware = RedisPrometheusMiddleware(registry=self.registry, app_name=service)
        self.group_pending = self.gauge(
            "rubricd_group_pending", "entries delivered to the group and not yet acked", ["stream", "group"]
        )
        self.group_lag = self.gauge(
            "rubricd_group_lag", "entries of the stream not yet delivered to the group", ["stream", "group"]
        )

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: Sequence[float], labels: Sequence[str] = ()) -> Histogram:
        return Histogram(name, doc, labels, buckets=buckets, registry=self.registry)

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, doc, labels, registry=self.registry)

    def watch_llm(
        self, llm: LLMClient, prices: Mapping[str, Price] | None = None, models: Mapping[str, str] | None = None
    ) -> None:
        """`models`: each agent's model, which `prices` (per model) turns its tokens into cost with."""
        self.registry.register(LLMCollector(llm, prices or {}, models or {}))

    async def read_consumer_groups(self, redis: Redis, consumer_groups: Iterable[tuple[str, str]]) -> None:
        """Refresh pending and lag of each (stream, consumer group)."""
        for stream, group in consumer_groups:
            pending, lag = await backlog(redis, stream, group)
            self.group_pending.labels(stream, group).set(pending)
            self.group_lag.labels(stream, group).set(lag)


async def backlog(redis: Redis, stream: str, group: str) -> tuple[int, int]:
    """(pending, lag) of one consumer group (0, 0 if there is none yet)."""
    try:
        infos = await redis.xinfo_groups(stream)
    except ResponseError:  # no such stream yet
        return 0, 0
    for info in infos:
        name = info["name"].decode() if isinstance(info["name"], bytes) else info["name"]
        if name == group:
            return int(info["pending"]), await group_lag(redis, stream, info)
    return 0, 0


class LLMCollector(Collector):
    """The LLM client's usage per agent, and its endpoints' health, read when scraped."""

    FIELDS = (
        ("rubricd_llm_calls", "LLM calls, each counted once however many attempts it took", "calls"),
        ("rubricd_llm_failures", "LLM calls that failed after their retries", "failures"),
        ("rubricd_llm_retries", "LLM attempts beyond each call's first", "retries"),
        ("rubricd_llm_seconds", "wall time of successful LLM calls, retries included", "elapsed_s"),
    )
    TOKENS = (("prompt", "prompt_tokens"), ("completion", "completion_tokens"), ("cached", "cached_tokens"))
    # Per endpoint (label: its URL, which holds no credentials: settings refuse them), as this process sees it.
    ENDPOINT_FIELDS = (
        ("rubricd_llm_endpoint_calls", "LLM attempts sent to the endpoint", "calls"),
        ("rubricd_llm_endpoint_failures", "LLM attempts it failed: unreachable, timed out, 429, 502-504", "failures"),
        ("rubricd_llm_endpoint_in_flight", "LLM attempts routed to the endpoint and not done", "in_flight"),
        ("rubricd_llm_endpoint_up", "0 while passed over after a failure, or paused by a Retry-After", "up"),
    )

    def __init__(
        self, llm: LLMClient, prices: Mapping[str, Price] | None = None, models: Mapping[str, str] | None = None
    ) -> None:
        self.llm = llm
        self.prices = prices or {}
        self.models = models or {}

    def collect(self) -> Iterator[Metric]:
        endpoints, usage = self.llm.endpoints(), self.llm.usage_all()
        for name, doc, field in self.ENDPOINT_FIELDS:
            kind = CounterMetricFamily if field in ("calls", "failures") else GaugeMetricFamily
            yield family(
                kind(name, doc, labels=["endpoint"]), [([url], getattr(h, field)) for url, h in endpoints.items()]
            )
        for name, doc, field in self.FIELDS:
            yield family(
                CounterMetricFamily(name, doc, labels=["agent"]), [([a], getattr(u, field)) for a, u in usage.items()]
            )
        tokens = CounterMetricFamily(
            "rubricd_llm_tokens",
            "tokens used, by kind (cached: served from the provider's prefix cache)",
            labels=["agent", "kind"],
        )
        yield family(tokens, [([a, kind], getattr(u, field)) for a, u in usage.items() for kind, field in self.TOKENS])
        cost = CounterMetricFamily(
            "rubricd_llm_cost",
            "cost of the tokens used (failed attempts included), at RUBRICD_PRICES; agents whose model has a price",
            labels=["agent", "model"],
        )
        priced = {a: m for a in usage if (m := self.models.get(a, "")) in self.prices}  # agent -> its priced model
        yield family(
            cost,
            [
                ([a, m], self.prices[m].cost(usage[a].prompt_tokens, usage[a].completion_tokens))
                for a, m in priced.items()
            ],
        )


def family(metric: CounterMetricFamily | GaugeMetricFamily, samples: Iterable[tuple[list[str], float]]) -> Metric:
    """`metric` with a sample per (labels, value)."""
    for labels, value in samples:
        metric.add_metric(labels, float(value))
    return metric
