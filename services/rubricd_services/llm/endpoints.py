"""An agent's endpoints: routing, failover and pauses.

An agent may have replicas (`replicas`: more endpoints serving its model). Each
attempt goes to the one, of those up, with the fewest calls in flight from this
process; one that fails for its own sake (unreachable, timed out, 502/503/504,
429) is passed over for `cooldown_s` and the attempt goes to another at once,
without backoff and without counting against `max_retries`. A Retry-After
pauses its endpoint for every call of the process (and, with `rpm` or `tpm`
set, of the deployment: see llm.limits).
"""

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd_services.llm.dialects import Tokens
from rubricd_services.llm.errors import Failed
from rubricd_services.llm.limits import RateLimit
from rubricd_services.llm.slots import SharedSlots
from rubricd_services.settings import LLMSettings


class EndpointHealth(msgspec.Struct, kw_only=True):
    """One endpoint as this process sees it."""

    calls: int = 0  # attempts sent to it
    failures: int = 0  # attempts it failed for its own sake: unreachable, timed out, overloaded (429, 502-504)
    in_flight: int = 0  # attempts routed to it and not done (waiting for its rate limit or a slot included)
    up: bool = True  # false while passed over after a failure (cooldown_s) or paused by a Retry-After


@dataclass(eq=False)
class Endpoint:
    url: str
    shared: SharedSlots | None = None
    rate: RateLimit | None = None
    rpm: int | None = None  # the endpoint's limits, booked by every agent that calls it
    tpm: int | None = None
    in_flight: int = 0
    calls: int = 0
    failures: int = 0
    down_until: float = 0.0  # time.monotonic(): passed over while another is up
    paused_until: float = 0.0  # time.monotonic(): no attempt goes out before

    def up(self, now: float) -> bool:
        return now >= self.down_until and now >= self.paused_until

    def health(self, now: float) -> EndpointHealth:
        return EndpointHealth(calls=self.calls, failures=self.failures, in_flight=self.in_flight, up=self.up(now))

    @contextlib.asynccontextmanager
    async def attempt(self, s: LLMSettings, cost: int, tokens: Tokens) -> AsyncIterator[None]:
        """Hold one attempt here, once the pause is over, the rate limits let it start and a shared slot is free;
        the tokens it booked are corrected with what the reply says it used."""
        self.in_flight += 1
        try:
            if (pause_s := self.paused_until - time.monotonic()) > 0:
                await asyncio.sleep(pause_s)
            rate = self.rate  # every agent's calls book the endpoint's limits, whichever agent set them
            if rate:
                await rate.acquire(self.rpm, self.tpm, cost)
            used = tokens.prompt + tokens.completion
            try:
                async with self._shared_slot(s):
                    self.calls += 1
                    yield
            finally:
                if rate and tokens.prompt + tokens.completion > used:
                    await rate.correct(self.tpm, tokens.prompt + tokens.completion - used - cost)
        finally:
            self.in_flight -= 1

    async def blame(self, failed: Failed, cooldown_s: float) -> None:
        """An attempt the endpoint failed: pass it over for `cooldown_s`, or, told when to come back (Retry-After),
        pause it until then for every call of this process and, with rate limits, of the deployment."""
        if not failed.transient:
            return
        self.failures += 1
        now = time.monotonic()
        if failed.retry_after_s:
            self.paused_until = max(self.paused_until, now + failed.retry_after_s)
            if self.rate:
                await self.rate.pause(failed.retry_after_s)
        else:
            self.down_until = now + cooldown_s

    def _shared_slot(self, s: LLMSettings) -> contextlib.AbstractAsyncContextManager[None]:
        """A slot of the endpoint's `shared_slots`, within the agent's share, held for one attempt."""
        shared = self.shared
        return shared.hold(s.max_share, s.timeout_s + 5) if shared else contextlib.nullcontext()


def endpoints_of(agents: Mapping[str, LLMSettings], redis: Redis | None, namespace: str) -> dict[str, Endpoint]:
    """Every agent's endpoints by URL, one per URL whichever agents call it, each with its shared slots (with
    `redis`) and its rate limits; raise ValueError when two agents set different rate limits for one endpoint."""
    found: dict[str, Endpoint] = {}
    keys = Keys(namespace)
    for s in agents.values():
        for url in urls(s):
            endpoint = found.setdefault(url, Endpoint(url))
            if redis is not None and s.shared_slots is not None and endpoint.shared is None:
                endpoint.shared = SharedSlots(redis, keys.llm_slots(url), s.shared_slots)
            if s.rpm or s.tpm:
                if (endpoint.rpm or endpoint.tpm) and (endpoint.rpm, endpoint.tpm) != (s.rpm, s.tpm):
                    raise ValueError(
                        f"agents calling {url} set different rate limits (rpm {endpoint.rpm} and {s.rpm}, tpm "
                        f"{endpoint.tpm} and {s.tpm}): they are the endpoint's, set them once (RUBRICD_LLM__RPM)"
                    )
                endpoint.rpm, endpoint.tpm = s.rpm, s.tpm
                if redis is not None and endpoint.rate is None:
                    endpoint.rate = RateLimit(redis, keys.llm_rate(url))
    return found


def urls(s: LLMSettings) -> list[str]:
    """The agent's endpoints: base_url and its replicas."""
    return list(dict.fromkeys([s.base_url, *s.replicas]))


def pick(endpoints: list[Endpoint]) -> Endpoint:
    """The endpoint with the fewest calls in flight of those up (ties: any), or, with none up, the one back first."""
    if len(endpoints) == 1:
        return endpoints[0]
    now = time.monotonic()
    up = [e for e in endpoints if e.up(now)]
    if not up:
        return min(endpoints, key=lambda e: max(e.down_until, e.paused_until))
    return min(up, key=lambda e: (e.in_flight, random.random()))
