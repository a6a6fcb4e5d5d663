"""What each run used of each agent (calls, tokens), read from its usage hash (`Keys.usage`), and its cost.

The services add to the hash (`rubricd_services.llm.usage`); `rubricd status`, the dashboard and the demo's
report read it here. Prices are the caller's (`RUBRICD_PRICES`): anything with `cost(prompt, completion)`.
"""

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd_services.state import runs

KINDS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "ms")


class Price(Protocol):
    """A model's price: what its tokens cost."""

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float: ...


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


async def run_usage(
    redis: Redis, keys: Keys, prices: Mapping[str, Price], run_ids: list[str] | None = None
) -> list[dict[str, Any]]:
    """Each run's LLM usage per agent and model, with its cost (None: no price for the model) and the run's (of
    `run_ids`, default the runs index's, those that used any)."""
    run_ids = await runs.listed(redis, keys) if run_ids is None else run_ids
    found = await runs.each(redis, run_ids, lambda pipe, run: pipe.hgetall(keys.usage(run)))
    rows = []
    for run_id, (raw,) in zip(run_ids, found, strict=True):
        if agents := parse(raw):
            rows.append(
                {
                    "run_id": run_id,
                    "agents": [asdict(u) | {"cost": u.cost(prices)} for u in agents],
                    "cost": total_cost(agents, prices),
                }
            )
    return rows
