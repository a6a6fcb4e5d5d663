"""Free loopback ports: one, a block of them in this xdist worker's own range, and a whole stack's from a base."""

import os
import random
import socket

import pytest

# The xdist worker this process is (gw0, gw1, ...; 0 without xdist): each draws free ports from a range of its own.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))


def port_free(port: int) -> bool:
    """No server listens on it (connections of a stopped one, in TIME_WAIT, do not count: servers reuse it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(n: int) -> int:
    """The first of N consecutive free loopback ports (Weaviate wants some in pairs), below the
    ephemeral range and away from the ports stack.sh derives (20000-23999); a thousand of them per xdist
    worker, so that two workers never pick the same block."""
    first = 24000 + 1000 * (WORKER % 6)
    for base in random.sample(range(first, first + 1000 - n, n), 40):
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


def stack_ports(base: int) -> dict[str, int]:
    """Every port a whole stack (services too) binds, from BASE on: 8 for the servers, the services' above, and
    the local model's last."""
    return {
        "RUBRICD_REDIS_PORT": base,
        "RUBRICD_WEAVIATE_PORT": base + 1,
        "RUBRICD_WEAVIATE_GRPC_PORT": base + 2,
        "RUBRICD_WEAVIATE_GOSSIP_PORT": base + 3,  # data: + 1
        "RUBRICD_WEAVIATE_RAFT_PORT": base + 5,  # raft rpc: + 1
        "RUBRICD_SIMULATOR_PORT": base + 7,
        "RUBRICD_METRICS_BASE_PORT": base
        + 8,  # scorer + 1, summarizer + 2, updater + 3, gateway + 4, comparer + 5, arm + 6, analyzer-i + 10 + i
        "RUBRICD_MODEL_PORT": base + 21,  # the local model's server
    }


@pytest.fixture
def free_port() -> int:
    """A free loopback port, away from the stacks' ports."""
    return free_port_block(1)


@pytest.fixture
def fresh_ports() -> dict[str, int]:
    """Free ports for one more whole stack (servers, and services with two analyzers)."""
    return stack_ports(free_port_block(22))
