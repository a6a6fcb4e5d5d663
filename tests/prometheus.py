"""A sample of a service's Prometheus registry, read as a scrape would see it (tests/runtime, tests/llm)."""

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rubricd_services.runtime.metrics import Metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    """The value of NAME's sample with exactly LABELS in METRICS' registry; KeyError where there is none."""
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    raise KeyError(f"{name}{labels}")
