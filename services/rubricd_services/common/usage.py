"""What each run used of each agent (calls, tokens), and what that cost at the configured prices.

A service that calls an LLM on behalf of a run adds the call to the run's usage
hash (`Keys.usage`): the scorer inside its commit script, the others with
`record` after the call. A verdict reused from the judge cache adds a cache hit
and no tokens. `RUBRICD_PRICES` (per model, per million tokens) turns tokens
into cost wherever they are shown: `rubricd status`, the demo report, and each
service's `rubricd_llm_cost` metric.
"""

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from rubricd.keys import Keys

from .llm import Completion, LLMGateway
from .settings import Price

T = TypeVar("T")
log = logging.getLogger("rubricd.usage")

KINDS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "ms")


@dataclass(frozen=True)
class AgentUsage:
    """One agent's (and model's) calls and tokens in one run."""

    agent: str
    model: str
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ms: int = 0  # wall time of the calls, retries included

    @property
    def seconds_per_call(self) -> float | None:
        return self.ms / 1000 / self.calls if self.calls else None

    def cost(self, prices: Mapping[str, Price]) -> float | None:
        """The cost of its tokens; None if its model has no price."""
        price = prices.get(self.model)
        return None if price is None else price.cost(self.prompt_tokens, self.completion_tokens)


def increments(
    agent: str,
    model: str,
    *,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    elapsed_s: float = 0.0,
    cached: bool = False,
) -> dict[str, int]:
    """The usage hash fields one call adds to (HINCRBY): a call, its tokens and time, or a cache hit."""
    if cached:
        return {f"{agent}:{model}:cache_hits": 1}
    return {
        f"{agent}:{model}:calls": 1,
        f"{agent}:{model}:prompt_tokens": prompt_tokens,
        f"{agent}:{model}:completion_tokens": completion_tokens,
        f"{agent}:{model}:ms": round(elapsed_s * 1000),
    }


async def record(redis: Redis, keys: Keys, run_id: str, agent: str, model: str, done: Completion[Any]) -> None:
    """Add one call of `agent` on behalf of `run_id` to the run's usage (after the call: a redelivered entry's
    second call is counted too, as it was made)."""
    spent = increments(
        agent,
        model,
        prompt_tokens=done.prompt_tokens,
        completion_tokens=done.completion_tokens,
        elapsed_s=done.elapsed_s,
    )
    async with redis.pipeline(transaction=False) as pipe:
        for name, n in spent.items():
            pipe.hincrby(keys.usage(run_id), name, n)
        await pipe.execute()


@dataclass(frozen=True)
class Metered:
    """The gateway's calls made for runs, each added to its run's usage when it returns."""

    gateway: LLMGateway
    redis: Redis
    keys: Keys

    async def structured(self, run_id: str, agent: str, messages: list[dict[str, str]], type_: type[T]) -> T:
        """The answer; recording its usage is bookkeeping: Redis failing at it is logged, and the answer kept."""
        done = await self.gateway.structured(agent, messages, type_)
        try:
            await record(self.redis, self.keys, run_id, agent, self.gateway.model(agent), done)
        except RedisError as e:
            log.warning("run %s: the %s call's usage was not recorded: %s", run_id, agent, e)
        return done.value


def parse(fields: Mapping[bytes | str, bytes | str] | Mapping[bytes, bytes] | Mapping[str, str]) -> list[AgentUsage]:
    """A usage hash as one AgentUsage per (agent, model), sorted; fields of another shape are skipped."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for raw, value in fields.items():
        name = raw.decode() if isinstance(raw, bytes) else raw
        agent, _, rest = name.partition(":")
        model, _, kind = rest.rpartition(":")
        if agent and model and kind in KINDS:
            counts.setdefault((agent, model), {})[kind] = int(value)
    return [AgentUsage(agent, model, **n) for (agent, model), n in sorted(counts.items())]


async def read(redis: Redis, keys: Keys, run_id: str) -> list[AgentUsage]:
    """What `run_id` has used so far."""
    return parse(await redis.hgetall(keys.usage(run_id)))


def total_cost(usage: Iterable[AgentUsage], prices: Mapping[str, Price]) -> float | None:
    """The cost of every priced agent's tokens; None if no model used has a price."""
    costs = [c for c in (u.cost(prices) for u in usage) if c is not None]
    return sum(costs) if costs else None
