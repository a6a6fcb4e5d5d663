"""A test's own namespace on the test stack: its keys, a client of its Redis, its evaluation memory."""

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd_services.memory.embedder import MiniLMEmbedder
from rubricd_services.memory.store import Memory
from rubricd_services.settings import ServiceSettings
from tests.support.stack import Stack


@pytest.fixture
def namespace() -> str:
    """A fresh namespace per test: its streams, keys and memory are its own."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def keys(namespace: str) -> Keys:
    return Keys(namespace)


@pytest.fixture
async def redis(stack: Stack) -> AsyncIterator[Redis]:
    """A client of the test Redis (bytes in, bytes out) on an empty database."""
    client = Redis.from_url(stack.redis_url, decode_responses=False)
    await client.flushdb()
    yield client
    await client.aclose()


@pytest.fixture
async def memory(stack: Stack, namespace: str) -> AsyncIterator[Memory]:
    """This test's evaluation memory (the services' collection), deleted afterwards."""
    settings = ServiceSettings(
        namespace=namespace, weaviate_url=stack.weaviate_url, weaviate_grpc_port=stack.weaviate_grpc_port
    )
    memory = await Memory.connect(settings, MiniLMEmbedder())
    yield memory
    await memory.drop()
    await memory.close()
