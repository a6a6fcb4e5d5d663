"""Reading a service's /metrics page."""

from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families


@pytest.fixture
def metric() -> Callable[..., float]:
    """metric(page, name, **labels): the sum of the samples of NAME whose labels include LABELS, in a /metrics page."""

    def value(page: str, name: str, **labels: str) -> float:
        return sum(
            s.value
            for family in text_string_to_metric_families(page)
            for s in family.samples
            if s.name == name and labels.items() <= s.labels.items()
        )

    return value
