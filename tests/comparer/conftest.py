"""Comparer processes for the comparer's integration tests (see tests/conftest.py: start_service)."""

import pytest


@pytest.fixture
def start_comparer(start_service):
    """start_comparer(**settings): a comparer in this test's namespace, reading once it returns."""
    return lambda **settings: start_service("comparer", **{"llm__max_retries": 2, **settings})
