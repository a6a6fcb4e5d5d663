"""Adding each run's LLM calls (calls, tokens) to its usage hash (`Keys.usage`); `rubricd_services.state.usage` reads it.

A service that calls an LLM on behalf of a run adds the call to the run's usage
hash: the scorer inside its commit script, the others with `record` after the
call. A verdict reused from the judge cache adds a cache hit and no tokens.
`RUBRICD_PRICES` (per model, per million tokens) turns tokens into cost wherever
they are shown: `rubricd status`, the dashboard, the demo report, and each
service's `rubricd_llm_cost` metric.
"""

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from rubricd.keys import Keys
from rubricd_services.llm import Completion, LLMClient

T = TypeVar("T")
log = logging.getLogger("rubricd.usage")


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


# (run id, agent, messages, answer type) -> an answer of that type, the call made for that run: Metered.structured
Ask = Callable[[str, str, list[dict[str, str]], type[T]], Awaitable[T]]


@dataclass(frozen=True)
class Metered:
    """The LLM client's calls made for runs, each added to its run's usage when it returns."""

    llm: LLMClient
    redis: Redis
    keys: Keys

    async def structured(self, run_id: str, agent: str, messages: list[dict[str, str]], type_: type[T]) -> T:
        """The answer; recording its usage is bookkeeping: Redis failing at it is logged, and the answer kept."""
        done = await self.llm.structured(agent, messages, type_)
        try:
            await record(self.redis, self.keys, run_id, agent, self.llm.model(agent), done)
        except RedisError as e:
            log.warning("run %s: the %s call's usage was not recorded: %s", run_id, agent, e)
        return done.value
