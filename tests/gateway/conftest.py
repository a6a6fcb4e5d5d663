"""A gateway process and a scorer for the gateway's integration tests (see tests/support/services.py: start_service)."""

import time

import httpx
import pytest

from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rubric_set, starter
from tests.support.ports import free_port_block

RUN = "gw-run"


@pytest.fixture
def start_gateway(start_service):
    """start_gateway(**settings) -> its base URL, once it answers /health."""

    def start(**settings: object) -> str:
        port = free_port_block(1)  # below the ephemeral range, where no client's port lands
        process = start_service("gateway", gateway_port=port, **settings)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 204:
                    return url
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"the gateway did not answer on {url}:\n{process.log.read_text()[-3000:]}")

    return start


@pytest.fixture
async def run_rubrics(redis, keys):
    """The test run's rubric set: one rubric, met iff the response holds the reference (the simulated judge)."""
    assert await RubricStore(redis, keys).publish(rubric_set(run_id=RUN))
    return RUN


# A scorer that judges every rollout (no judge cache), so a second judging would show at the simulator.
start_scorer = starter("scorer", llm__max_retries=1, judge_cache_ttl_s=0)
