"""`LLMClient`: an agent's call, from the request to a typed answer, and what its calls used.

It counts retries itself (the openai client's own retries are off) so usage and
failures are visible per agent.
"""

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import msgspec
import openai
from redis.asyncio import Redis

from rubricd import wire
from rubricd_services.llm.dialects import (
    DIALECTS,
    PROBE_MESSAGES,
    ChatReply,
    EmbeddingReply,
    Probe,
    Tokens,
    TokenUsage,
    answer,
    request,
    schema_of,
)
from rubricd_services.llm.endpoints import EndpointHealth, endpoints_of, pick, urls
from rubricd_services.llm.errors import LLMError, Retryable, backoff, clip, failure, redact
from rubricd_services.settings import CHARS_PER_TOKEN, LLMSettings, ServiceSettings

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger("rubricd.llm")

# httpx.Limits under openai 1.x, httpx2.Limits under 3.x: take it from the SDK.
_Limits = type(openai.DEFAULT_CONNECTION_LIMITS)
_ANSWER_TOKENS = 1024  # what a call without max_tokens books against `tpm` for its answer


class Usage(msgspec.Struct, kw_only=True):
    """What one agent has used since the LLM client started."""

    calls: int = 0
    failures: int = 0  # calls that raised LLMError
    retries: int = 0  # attempts beyond each call's first
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the provider served from its prefix cache
    elapsed_s: float = 0.0  # wall time of successful calls, retries included


@dataclass(frozen=True, slots=True)
class Completion(Generic[T]):
    """A decoded answer, with what it cost (tokens summed over its attempts)."""

    value: T
    attempts: int
    elapsed_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


class LLMClient:
    """Typed LLM calls for a set of named agents; one HTTP client per endpoint and key."""

    def __init__(
        self, agents: Mapping[str, LLMSettings], *, redis: Redis | None = None, namespace: str = "rubricd"
    ) -> None:
        """`redis`: where endpoints with `shared_slots` count their calls (see llm.slots) and those with `rpm`
        or `tpm` book them (see llm.limits); without it, or without those settings, an endpoint's calls are only
        limited per process (`concurrency`)."""
        self._settings = dict(agents)
        self._usage = {name: Usage() for name in self._settings}
        self._slots = {name: asyncio.Semaphore(s.concurrency) for name, s in self._settings.items()}
        self._pool: dict[tuple[str, str], int] = {}
        for s in self._settings.values():
            for url in urls(s):
                key = _client_key(s, url)
                self._pool[key] = self._pool.get(key, 0) + s.concurrency
        self._endpoints = endpoints_of(self._settings, redis, namespace)
        self._routes = {name: [self._endpoints[url] for url in urls(s)] for name, s in self._settings.items()}
        self._clients: dict[tuple[str, str], openai.AsyncOpenAI] = {}

    @classmethod
    def from_settings(cls, settings: ServiceSettings, agents: Iterable[str], redis: Redis | None = None) -> "LLMClient":
        return cls({name: settings.agent(name) for name in agents}, redis=redis, namespace=settings.namespace)

    async def start(self) -> None:
        """Create the clients now rather than on first use (nothing connects yet)."""
        for s in self._settings.values():
            for url in urls(s):
                self._client(s, url)

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    async def __aenter__(self) -> "LLMClient":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def model(self, agent: str) -> str:
        return self._agent(agent).model

    def output_mode(self, agent: str) -> str:
        """The agent's dialect (once detect() has resolved `auto`)."""
        return self._agent(agent).output_mode

    def usage(self, agent: str) -> Usage:
        return msgspec.structs.replace(self._usage[agent])

    def usage_all(self) -> dict[str, Usage]:
        return {name: self.usage(name) for name in self._usage}

    def endpoints(self) -> dict[str, EndpointHealth]:
        """Each endpoint's calls, failures, calls in flight and whether it is up, by URL."""
        now = time.monotonic()
        return {url: endpoint.health(now) for url, endpoint in self._endpoints.items()}

    async def structured(
        self, agent: str, messages: list[dict[str, str]], type_: type[T], *, model: str | None = None
    ) -> Completion[T]:
        """Ask `agent` for one `type_` instance; raise LLMError when every attempt failed. `model`: another model
        its endpoint serves (a Rubric-ARM frozen model's version), in place of the agent's own."""
        s, schema, tokens = self._agent(agent), schema_of(cast(type, type_)), Tokens()
        if s.output_mode == "auto":
            raise RuntimeError(f"agent {agent!r}: output_mode auto is resolved by LLMClient.detect() at start")
        fields, messages = request(s, schema, messages)
        body: dict[str, Any] = {"model": model or s.model, "temperature": s.temperature, **fields, "messages": messages}
        if s.max_tokens:
            body["max_tokens"] = s.max_tokens
        cost = _estimate((m.get("content") or "" for m in messages), s.max_tokens or _ANSWER_TOKENS)

        async def once(client: openai.AsyncOpenAI) -> T:
            reply = await self._post(client, "/chat/completions", body, s, ChatReply, tokens, agent)
            return answer(reply, type_, s.output_mode)

        value, attempts, elapsed = await self._run(agent, once, cost, tokens)
        return Completion(value, attempts, elapsed, tokens.prompt, tokens.completion, tokens.cached)

    async def detect(self, agents: Iterable[str]) -> dict[str, str]:
        """Resolve each of these (chat) agents whose output_mode is `auto`: probe its endpoint (URL, key, model)
        once, trying the dialects in order, and keep the first that works; {agent: dialect} of those resolved.
        Raise LLMError, with each dialect's failure, when none works."""
        found: dict[tuple[str, str, str], str] = {}
        resolved: dict[str, str] = {}
        for name in agents:
            s = self._agent(name)
            if s.output_mode != "auto":
                continue
            key = (*_client_key(s, s.base_url), s.model)
            if key not in found:
                found[key] = await self._probe(name, s)
            self._settings[name] = s.model_copy(update={"output_mode": found[key]})
            resolved[name] = found[key]
        return resolved

    async def _probe(self, agent: str, s: LLMSettings) -> str:
        failures = []
        try:
            for mode in DIALECTS:
                self._settings[agent] = s.model_copy(update={"output_mode": mode, "max_retries": 0, "max_tokens": 256})
                try:
                    await self.structured(agent, PROBE_MESSAGES, Probe)
                except LLMError as e:
                    failures.append(f"{mode}: {e.reason}")
                    continue
                log.info(
                    "%s at %s: output_mode %s%s",
                    s.model,
                    s.base_url,
                    mode,
                    f" (refused or not enforced: {'; '.join(failures)})" if failures else "",
                )
                return mode
        finally:
            self._settings[agent] = s
        raise LLMError(agent, len(failures), f"no output_mode works with {s.base_url}: {'; '.join(failures)}")

    async def embed(self, agent: str, texts: list[str]) -> Completion[list[list[float]]]:
        """Embed `texts` with `agent`'s model (memory objects: Weaviate runs without a vectorizer)."""
        s, tokens = self._agent(agent), Tokens()
        body = {"model": s.model, "input": texts, "encoding_format": "float"}

        async def once(client: openai.AsyncOpenAI) -> list[list[float]]:
            reply = await self._post(client, "/embeddings", body, s, EmbeddingReply, tokens, agent)
            if len(reply.data) != len(texts):
                raise Retryable(f"{len(reply.data)} embeddings for {len(texts)} texts")
            return [d.embedding for d in sorted(reply.data, key=lambda d: d.index)]

        value, attempts, elapsed = await self._run(agent, once, _estimate(texts, 0), tokens)
        return Completion(value, attempts, elapsed, tokens.prompt, tokens.completion, tokens.cached)

    async def _post(
        self,
        client: openai.AsyncOpenAI,
        path: str,
        body: dict[str, Any],
        s: LLMSettings,
        reply_type: type[R],
        tokens: Tokens,
        agent: str,
    ) -> R:
        """POST through the client (auth, timeout, error mapping) and decode the reply with msgspec.

        The typed `create()` methods walk every request through the SDK's transform
        (milliseconds of CPU for a judge call with a schema); the hot path skips it.
        """
        raw = await client.post(path, cast_to=bytes, body=body, options={"timeout": s.timeout_s})
        try:
            reply = wire.decode(raw, reply_type)
        except msgspec.DecodeError as e:
            raise Retryable(f"unreadable reply: {clip(e, 80)}") from None
        self._count(agent, getattr(reply, "usage", None), tokens)
        return reply

    async def _run(
        self, agent: str, once: Callable[[openai.AsyncOpenAI], Awaitable[R]], cost: int, tokens: Tokens
    ) -> tuple[R, int, float]:
        """Attempt `once` up to 1 + max_retries times, each on the least loaded endpoint that is up and holding one
        concurrency slot; an attempt an endpoint failed goes at once to another that is up, uncounted (at most
        once per other endpoint). `cost`: the tokens it books against `tpm`; `tokens`: what its replies used."""
        s, usage, endpoints = self._settings[agent], self._usage[agent], self._routes[agent]
        usage.calls += 1
        start, retries, failovers = time.perf_counter(), 0, len(endpoints) - 1
        for attempt in itertools.count(1):
            endpoint = endpoints[0]
            try:
                async with self._slots[agent]:
                    endpoint = pick(endpoints)
                    async with endpoint.attempt(s, cost, tokens):
                        value = await once(self._client(s, endpoint.url))
                elapsed = time.perf_counter() - start
                usage.elapsed_s += elapsed
                return value, attempt, elapsed
            except (Retryable, openai.APIConnectionError, openai.APIStatusError) as e:
                failed = failure(e, s, endpoint.url)
            await endpoint.blame(failed, s.cooldown_s)
            if failed.final:
                break
            if failed.transient and failovers and pick(endpoints).up(time.monotonic()):
                failovers -= 1  # another endpoint is up: no reason to wait
            elif retries < s.max_retries:
                retries += 1
                await asyncio.sleep(max(failed.retry_after_s, backoff(s.backoff_s, retries)))
            else:
                break
            usage.retries += 1
        usage.failures += 1
        raise LLMError(agent, attempt, redact(failed.reason, s.api_key.get_secret_value()), transient=failed.transient)

    def _agent(self, agent: str) -> LLMSettings:
        try:
            return self._settings[agent]
        except KeyError:
            raise KeyError(f"no LLM settings for agent {agent!r}") from None

    def _client(self, s: LLMSettings, url: str) -> openai.AsyncOpenAI:
        """The endpoint's client, over aiohttp (the SDK's `aiohttp` extra): at hundreds of
        calls in flight it spends about a fifth less CPU per call than the default httpx pool."""
        key = _client_key(s, url)
        if key not in self._clients:
            size = self._pool[key]  # every agent's concurrency on this endpoint: no call waits for a connection
            self._clients[key] = openai.AsyncOpenAI(
                base_url=url,
                api_key=key[1],
                max_retries=0,
                timeout=s.timeout_s,
                http_client=openai.DefaultAioHttpClient(
                    limits=_Limits(max_connections=size, max_keepalive_connections=size)
                ),
            )
        return self._clients[key]

    def _count(self, agent: str, usage: TokenUsage | None, tokens: Tokens) -> None:
        if usage is None:
            return
        got = Tokens.of(usage)
        u = self._usage[agent]
        u.prompt_tokens += got.prompt
        u.completion_tokens += got.completion
        u.cached_tokens += got.cached
        tokens.add(got)


def _client_key(s: LLMSettings, url: str) -> tuple[str, str]:
    """What one HTTP client serves: an endpoint's URL and the key the agent calls it with."""
    return url, s.api_key.get_secret_value()


def _estimate(texts: Iterable[str], answer_tokens: int) -> int:
    """The tokens a call books against `tpm` before its reply says: a token per CHARS_PER_TOKEN characters of its
    prompt (fewer than most tokenizers give: it books on the safe side), and its answer's bound."""
    return int(sum(len(text) for text in texts) / CHARS_PER_TOKEN) + answer_tokens
