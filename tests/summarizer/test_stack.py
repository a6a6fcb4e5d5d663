"""`deploy/local/stack.sh up` runs the memory loop: analyzer workers and the summarizer turn a closed step into a summary."""

import asyncio
import random
import socket
import time

import pytest

from rubricd import Rollout, RubricdClient, wire
from rubricd.keys import Keys
from rubricd.messages import StepSummary

pytestmark = pytest.mark.integration


def free_port_block(n: int) -> int:
    """N consecutive free loopback ports below the ephemeral range (as tests/test_stack.py picks them)."""
    for base in random.sample(range(24000, 30000, n), 50):
        socks = [socket.socket() for _ in range(n)]
        try:
            for i, s in enumerate(socks):
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


async def test_a_step_published_to_a_local_stack_comes_back_summarized(stack, start_stack) -> None:
    base = free_port_block(8)
    ports = {
        "RUBRICD_REDIS_PORT": base, "RUBRICD_WEAVIATE_PORT": base + 1, "RUBRICD_WEAVIATE_GRPC_PORT": base + 2,
        "RUBRICD_WEAVIATE_GOSSIP_PORT": base + 3, "RUBRICD_WEAVIATE_RAFT_PORT": base + 5, "RUBRICD_SIMULATOR_PORT": base + 7,
    }  # fmt: skip
    local = start_stack(ports, "redis", "weaviate", "simulator", "services")
    status = local.sh("status").stdout
    for name in ("analyzer-1", "analyzer-2", "summarizer"):
        assert any(line.split()[:2] == [name, "up"] for line in status.splitlines()), status
    redis_url = f"redis://127.0.0.1:{base}/0"
    padded = "17 + 25 = 42. " + "Let me restate the whole calculation once more to be thorough. " * 10
    rollouts = [Rollout(run_id="stack", rollout_id=f"s0-r{i}", step=0, prompt="What is 17 + 25?", reference="42",
                        response=padded if i % 2 else "17 + 25 = 42.") for i in range(4)]  # fmt: skip
    async with RubricdClient(redis_url) as client:
        await client.score(rollouts, timeout=120)
        await client.close_step("stack", 0, rollouts=len(rollouts))
        deadline = time.monotonic() + 120
        keys = Keys()
        while time.monotonic() < deadline and not await client.redis.xlen(keys.summaries):
            await asyncio.sleep(0.5)
        [(_, fields)] = await client.redis.xrange(keys.summaries)
    summary = wire.decode(wire.payload(fields), StepSummary)
    assert summary.analyses == 4 and {p.type: p.rollouts for p in summary.reward_hacking}.get("padding") == 2
