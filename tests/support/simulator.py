"""An in-process LLM simulator on a free port, for tests that configure it directly (the stack runs its own)."""

from collections.abc import Iterator

import pytest

from rubricd_testbed.simulator.app import Simulator, serve_in_background
from rubricd_testbed.simulator.faults import SimConfig


@pytest.fixture(scope="module")
def simulator() -> Iterator[tuple[str, Simulator]]:
    """An in-process LLM simulator on a free port: (base url, the simulator to configure)."""
    with serve_in_background(SimConfig()) as running:
        yield running


@pytest.fixture
def sim(simulator: tuple[str, Simulator]) -> Iterator[Simulator]:
    """The in-process simulator, reset to its defaults after the test."""
    yield simulator[1]
    simulator[1].reset()
