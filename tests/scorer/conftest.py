"""Scorer processes for the scorer's integration tests (see tests/conftest.py: start_service)."""

import pytest


@pytest.fixture
def start_scorer(start_service):
    """start_scorer(**settings): a scorer in this test's namespace, reading once it returns."""
    return lambda **settings: start_service("scorer", **{"llm__max_retries": 2, **settings})
