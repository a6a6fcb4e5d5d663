"""Updater processes for the updater's integration tests (see tests/conftest.py: start_service)."""

from tests.factories import starter

start_updater = starter("updater", llm__max_retries=2)
