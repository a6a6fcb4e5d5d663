"""Analyzer processes for the analyzer's integration tests (see tests/conftest.py: start_service)."""

import pytest


@pytest.fixture
def start_analyzer(start_service):
    """start_analyzer(*args, **settings): analyzer process(es), not yet waited for (`--workers N` starts several consumers)."""
    return lambda *args, **settings: start_service("analyzer", *args, wait=False, **settings)
