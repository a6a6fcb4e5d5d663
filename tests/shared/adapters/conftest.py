"""The adapters' tests' client (a real scorer, Redis and the LLM simulator behind it) and what it published."""

from collections.abc import Awaitable, Callable

import pytest

from rubricd import RubricdClient, SyncRubricdClient, wire
from rubricd.messages import Rollout, StepClosed


@pytest.fixture
def client(stack, keys, start_service):
    start_service("scorer", llm__max_retries=1)
    client = SyncRubricdClient(stack.redis_url, namespace=keys.namespace)
    yield client
    client.close()


@pytest.fixture
async def aio(stack, keys, start_service):
    """A RubricdClient on the test's event loop, with a scorer to answer it."""
    start_service("scorer", llm__max_retries=1)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        yield client


@pytest.fixture(scope="session")
def published() -> Callable[..., Awaitable[list[Rollout]]]:
    async def published(redis, keys) -> list[Rollout]:
        return [wire.decode(wire.payload(f), Rollout) for _, f in await redis.xrange(keys.rollouts)]

    return published


@pytest.fixture(scope="session")
def closed() -> Callable[..., Awaitable[list[StepClosed]]]:
    async def closed(redis, keys) -> list[StepClosed]:
        return [wire.decode(wire.payload(f), StepClosed) for _, f in await redis.xrange(keys.steps)]

    return closed
