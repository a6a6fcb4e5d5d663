"""How a session runs: tests that use the stack marked `integration`, the slow directories handed out first, and
a SIGTERM ending the session as Ctrl-C does."""

import signal

import pytest

# The directories whose modules take minutes each (whole stacks, trainers, the demo): run first, so that under
# xdist the short modules fill the workers around them instead of waiting behind them at the end.
FIRST = ("tests/system/", "tests/demo/")


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM (a CI timeout, `kill`) ends the session like Ctrl-C does, so
    # the session's finalizers still take the stack down.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
    first = tuple(str(config.rootpath / d) for d in FIRST)
    items.sort(key=lambda item: not str(item.path).startswith(first))
