"""Updater processes for the updater's integration tests (see tests/conftest.py: start_service)."""

import pytest


@pytest.fixture
def start_updater(start_service):
    """start_updater(**settings): an updater in this test's namespace, reading once it returns."""
    return lambda **settings: start_service("updater", **{"llm__max_retries": 2, **settings})
