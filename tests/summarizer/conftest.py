"""Summarizer and analyzer processes for the summarizer's integration tests (see tests/conftest.py: start_service)."""

import pytest


@pytest.fixture
def start_analyzer(start_service):
    return lambda *args, **settings: start_service("analyzer", *args, wait=False, **settings)


@pytest.fixture
def start_summarizer(start_service):
    """start_summarizer(**settings): a summarizer, not yet waited for (tests call `wait_consuming`)."""
    return lambda **settings: start_service("summarizer", wait=False, **settings)
