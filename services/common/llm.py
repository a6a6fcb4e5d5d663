"""The one way services talk to an LLM: typed structured output with bounded retries.

Every agent (judge, analyzer, summarizer, ...) has its own `LLMSettings`, so one
service can point agents at different endpoints and models. The gateway turns a
msgspec Struct into a JSON Schema, asks the endpoint for it in the endpoint's
dialect (`output_mode`), validates the answer with msgspec, and retries what a
retry can fix (timeouts, connection errors, 429, 5xx, invalid or truncated
output). A refusal a retry cannot fix (4xx, or a 5xx that says the request is
invalid) fails the call at once with the server's reason. It counts retries
itself (the openai client's own retries are off) so usage and failures are
visible per agent.

The dialects, each making the server enforce the schema (but the last two):
- `json_schema`: `response_format: {"type": "json_schema", ...}` (OpenAI, vLLM,
  llama.cpp's llama-server, Ollama >= 0.5);
- `json_object_schema`: `response_format: {"type": "json_object", "schema":
  ...}` (llama-cpp-python's server, llama-server);
- `guided_json`: vLLM's `guided_json` request field;
- `format`: Ollama's `format` request field;
- `json_object`: JSON without a schema, the schema described in the system
  message, the answer parsed tolerantly; `text`: the same without asking for JSON.
`auto` probes each endpoint once at start (`detect`) with a schema no model
would meet unless the server enforced it, in the order above, and keeps the
first dialect that works.
"""

import asyncio
import contextlib
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar, cast

import json_repair
import msgspec
import openai
from redis.asyncio import Redis

from rubricd import wire

from .settings import LLMSettings, ServiceSettings
from .slots import SharedSlots, slots_key

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger("rubricd.llm")

# httpx.Limits under openai 1.x, httpx2.Limits under 3.x: take it from the SDK.
_Limits = type(openai.DEFAULT_CONNECTION_LIMITS)
_MAX_BACKOFF_S = 30.0
_OVERLOADED = (408, 429, 502, 503, 504)  # statuses that say the endpoint, not the request, failed
_USERINFO = re.compile(r"//[^/@\s]+@")
_INVALID_REQUEST = re.compile(
    r"input should be|not supported|unsupported|invalid|validation error|extra (inputs|fields)|unknown (field|param)",
    re.I,
)
ENFORCING = ("json_schema", "json_object_schema", "guided_json", "format")  # the server holds the model to it
DIALECTS = (*ENFORCING, "json_object", "text")  # in the order `auto` tries them
_KEYLIKE = re.compile(r"\b(sk|key|api[-_]?key)[-_][A-Za-z0-9_*.\-]{4,}", re.I)
# Keywords OpenAI strict mode rejects; msgspec still checks them on decode.
_STRICT_DROP = {
    "default",
    "discriminator",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "examples",
}


class _Probe(msgspec.Struct, frozen=True, kw_only=True):
    """What `detect` asks for: no model writes this unless the server holds it to the schema (or, in the
    json_object and text dialects, the schema is shown to it)."""

    rubricd_probe: Literal["k7q2"]


_PROBE_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Say hello."},
]


class LLMError(Exception):
    """An agent's call failed after its retries. The text is short and safe to log.

    `transient`: the last attempt failed for the endpoint's sake (unreachable, timed out, overloaded: 429, 502,
    503, 504), not for the request's; a later try of the same request may succeed.
    """

    def __init__(self, agent: str, attempts: int, reason: str, *, transient: bool = False) -> None:
        self.agent, self.attempts, self.reason, self.transient = agent, attempts, reason, transient
        super().__init__(f"LLM agent {agent!r} failed after {attempts} attempt(s): {reason}")


class Usage(msgspec.Struct, kw_only=True):
    """What one agent has used since the gateway started."""

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


class _Retryable(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


# Just the fields of a reply the gateway reads; msgspec skips the rest.
class _TokenDetails(msgspec.Struct):
    cached_tokens: int | None = 0


class _TokenUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _TokenDetails | None = None


class _Message(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _ChatReply(msgspec.Struct):
    choices: list[_Choice]
    usage: _TokenUsage | None = None


class _Embedding(msgspec.Struct):
    index: int
    embedding: list[float]


class _EmbeddingReply(msgspec.Struct):
    data: list[_Embedding]
    usage: _TokenUsage | None = None


@dataclass(frozen=True, slots=True)
class _Schema:
    name: str
    plain: dict[str, Any]  # as msgspec writes it, root inlined
    strict: dict[str, Any] | None  # fit for OpenAI strict mode, or None if impossible
    instruction: str  # the sentence json_object / text modes add to the system message


class LLMGateway:
    """Typed LLM calls for a set of named agents; one HTTP client per endpoint and key."""

    def __init__(
        self, agents: Mapping[str, LLMSettings], *, redis: Redis | None = None, namespace: str = "rubricd"
    ) -> None:
        """`redis`: where endpoints with `shared_slots` count their calls (see common.slots); without it, or
        without that setting, an endpoint's calls are only limited per process (`concurrency`)."""
        self._settings = dict(agents)
        self._shared = {
            s.base_url: SharedSlots(redis, slots_key(namespace, s.base_url), s.shared_slots)
            for s in self._settings.values()
            if redis is not None and s.shared_slots is not None
        }
        self._usage = {name: Usage() for name in self._settings}
        self._slots = {name: asyncio.Semaphore(s.concurrency) for name, s in self._settings.items()}
        self._pool: dict[tuple[str, str], int] = {}
        for s in self._settings.values():
            self._pool[_endpoint(s)] = self._pool.get(_endpoint(s), 0) + s.concurrency
        self._clients: dict[tuple[str, str], openai.AsyncOpenAI] = {}

    @classmethod
    def from_settings(
        cls, settings: ServiceSettings, agents: Iterable[str], redis: Redis | None = None
    ) -> "LLMGateway":
        return cls({name: settings.agent(name) for name in agents}, redis=redis, namespace=settings.namespace)

    async def start(self) -> None:
        """Create the clients now rather than on first use (nothing connects yet)."""
        for s in self._settings.values():
            self._client(s)

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    async def __aenter__(self) -> "LLMGateway":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def usage(self, agent: str) -> Usage:
        return msgspec.structs.replace(self._usage[agent])

    def usage_all(self) -> dict[str, Usage]:
        return {name: self.usage(name) for name in self._usage}

    async def structured(self, agent: str, messages: list[dict[str, str]], type_: type[T]) -> Completion[T]:
        """Ask `agent` for one `type_` instance; raise LLMError when every attempt failed."""
        s, schema, tokens = self._agent(agent), _schema_of(cast(type, type_)), [0, 0, 0]
        if s.output_mode == "auto":
            raise RuntimeError(f"agent {agent!r}: output_mode auto is resolved by LLMGateway.detect() at start")
        fields, messages = _request(s, schema, messages)
        body: dict[str, Any] = {"model": s.model, "temperature": s.temperature, **fields, "messages": messages}
        if s.max_tokens:
            body["max_tokens"] = s.max_tokens

        async def once(client: openai.AsyncOpenAI) -> T:
            reply = await self._post(client, "/chat/completions", body, s, _ChatReply, tokens, agent)
            if not reply.choices:
                raise _Retryable("reply without choices")
            if reply.choices[0].finish_reason == "length":
                raise _Retryable("truncated output (finish_reason=length)")
            content = reply.choices[0].message.content or ""
            return _decode(content, type_, tolerant=s.output_mode not in ENFORCING)

        value, attempts, elapsed = await self._run(agent, once)
        return Completion(value, attempts, elapsed, *tokens)

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
            key = (*_endpoint(s), s.model)
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
                    await self.structured(agent, _PROBE_MESSAGES, _Probe)
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
        s, tokens = self._agent(agent), [0, 0, 0]
        body = {"model": s.model, "input": texts, "encoding_format": "float"}

        async def once(client: openai.AsyncOpenAI) -> list[list[float]]:
            reply = await self._post(client, "/embeddings", body, s, _EmbeddingReply, tokens, agent)
            if len(reply.data) != len(texts):
                raise _Retryable(f"{len(reply.data)} embeddings for {len(texts)} texts")
            return [d.embedding for d in sorted(reply.data, key=lambda d: d.index)]

        value, attempts, elapsed = await self._run(agent, once)
        return Completion(value, attempts, elapsed, *tokens)

    async def _post(
        self,
        client: openai.AsyncOpenAI,
        path: str,
        body: dict[str, Any],
        s: LLMSettings,
        reply_type: type[R],
        tokens: list[int],
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
            raise _Retryable(f"unreadable reply: {_clip(e, 80)}") from None
        self._count(agent, getattr(reply, "usage", None), tokens)
        return reply

    async def _run(self, agent: str, once: Callable[[openai.AsyncOpenAI], Awaitable[R]]) -> tuple[R, int, float]:
        """Attempt `once` up to 1 + max_retries times; each attempt holds one concurrency slot."""
        s, usage = self._settings[agent], self._usage[agent]
        usage.calls += 1
        start, reason, wait_s, transient = time.perf_counter(), "", 0.0, False
        for attempt in range(1, s.max_retries + 2):
            if attempt > 1:
                usage.retries += 1
                await asyncio.sleep(max(wait_s, _backoff(s.backoff_s, attempt - 1)))
            wait_s, transient = 0.0, True
            try:
                async with self._slots[agent], self._shared_slot(s):
                    value = await once(self._client(s))
                elapsed = time.perf_counter() - start
                usage.elapsed_s += elapsed
                return value, attempt, elapsed
            except _Retryable as e:
                reason, transient = e.reason, False
            except openai.APITimeoutError as e:
                # aiohttp's refused connection reaches us as a connect timeout: say which it was.
                reason = (
                    f"cannot connect to {s.base_url}"
                    if _caused_by(e, ConnectionError)
                    else f"timed out after {s.timeout_s:g}s"
                )
            except openai.APIConnectionError:
                reason = f"cannot connect to {s.base_url}"
            except openai.APIStatusError as e:
                reason, transient = f"HTTP {e.status_code}: {_clip(e.message)}", e.status_code in _OVERLOADED
                if (e.status_code not in (408, 429) and e.status_code < 500) or _refused(e):
                    break  # the request itself is wrong: retrying cannot help
                wait_s = _retry_after(e.response.headers)
        usage.failures += 1
        raise LLMError(agent, attempt, redact(reason, s.api_key.get_secret_value()), transient=transient)

    def _shared_slot(self, s: LLMSettings) -> contextlib.AbstractAsyncContextManager[None]:
        """A slot of the endpoint's `shared_slots`, within the agent's share, held for one attempt."""
        shared = self._shared.get(s.base_url)
        return shared.hold(s.max_share, s.timeout_s + 5) if shared else contextlib.nullcontext()

    def _agent(self, agent: str) -> LLMSettings:
        try:
            return self._settings[agent]
        except KeyError:
            raise KeyError(f"no LLM settings for agent {agent!r}") from None

    def _client(self, s: LLMSettings) -> openai.AsyncOpenAI:
        """The endpoint's client, over aiohttp (the SDK's `aiohttp` extra): at hundreds of
        calls in flight it spends about a fifth less CPU per call than the default httpx pool."""
        key = _endpoint(s)
        if key not in self._clients:
            size = self._pool[key]  # every agent's concurrency on this endpoint: no call waits for a connection
            self._clients[key] = openai.AsyncOpenAI(
                base_url=s.base_url,
                api_key=key[1],
                max_retries=0,
                timeout=s.timeout_s,
                http_client=openai.DefaultAioHttpClient(
                    limits=_Limits(max_connections=size, max_keepalive_connections=size)
                ),
            )
        return self._clients[key]

    def _count(self, agent: str, usage: "_TokenUsage | None", tokens: list[int]) -> None:
        if usage is None:
            return
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        got = (usage.prompt_tokens, usage.completion_tokens, cached or 0)
        u = self._usage[agent]
        u.prompt_tokens, u.completion_tokens, u.cached_tokens = (
            u.prompt_tokens + got[0],
            u.completion_tokens + got[1],
            u.cached_tokens + got[2],
        )
        tokens[:] = [a + b for a, b in zip(tokens, got)]


def _refused(error: openai.APIStatusError) -> bool:
    """A 500 or 501 whose message says the request was invalid (some servers answer a request they cannot
    parse, e.g. an unsupported response_format, with 500): retrying the same request cannot help."""
    return error.status_code in (500, 501) and bool(_INVALID_REQUEST.search(str(error.message)))


def _request(
    s: LLMSettings, schema: "_Schema", messages: list[dict[str, str]]
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The request fields, and the messages, that ask for `schema` in the agent's dialect. Only OpenAI's strict
    mode gets the strict form; grammar-enforcing servers get the whole schema, length bounds included."""
    spec, strict = schema.plain, False
    match s.output_mode:
        case "json_schema":
            if s.strict and schema.strict is not None:
                spec, strict = schema.strict, True
            return {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": schema.name, "schema": spec, "strict": strict},
                }
            }, messages
        case "json_object_schema":
            return {"response_format": {"type": "json_object", "schema": spec}}, messages
        case "guided_json":
            return {"guided_json": spec}, messages
        case "format":
            return {"format": spec}, messages
        case "json_object":
            return {"response_format": {"type": "json_object"}}, _with_instruction(messages, schema.instruction)
        case _:
            return {}, _with_instruction(messages, schema.instruction)


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    while error is not None:
        if isinstance(error, kind):
            return True
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return False


def _endpoint(s: LLMSettings) -> tuple[str, str]:
    return s.base_url, s.api_key.get_secret_value()


def _backoff(base_s: float, retry: int) -> float:
    return min(_MAX_BACKOFF_S, base_s * 2.0 ** (retry - 1)) * random.uniform(0.5, 1.5)


def _retry_after(headers: Mapping[str, str]) -> float:
    """Honour a provider's Retry-After (ms or s), capped so one reply cannot stall a call."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return min(_MAX_BACKOFF_S, float(headers.get(name, "")) * scale)
        except ValueError:
            continue
    return 0.0


def _clip(what: object, limit: int = 160) -> str:
    text = " ".join(str(what).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def redact(text: str, *secrets: str) -> str:
    """No key in a text, even one a provider echoes back: the given secrets, key-like words, a URL's userinfo."""
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return _USERINFO.sub("//***@", _KEYLIKE.sub("***", text))


def _decode(content: str, type_: type[T], *, tolerant: bool) -> T:
    """Validate `content` as `type_`; tolerant mode digs JSON out of fences, prose and near-JSON."""
    try:
        return wire.decode(content, type_)
    except msgspec.ValidationError as e:
        raise _Retryable(f"invalid output: {_clip(e, 120)}") from None
    except msgspec.DecodeError:
        if not tolerant:
            raise _Retryable("malformed output: not JSON") from None
    fenced = re.search(r"```(?:json)?\s*(.*?)```", content, re.S)
    text = fenced.group(1) if fenced else content
    start, end = text.find("{"), text.rfind("}")
    text = text[start : end + 1] if 0 <= start < end else text
    try:
        return msgspec.convert(json_repair.loads(text), type_)
    except (msgspec.ValidationError, ValueError, TypeError) as e:
        raise _Retryable(f"malformed output: {_clip(e, 120)}") from None


def _with_instruction(messages: list[dict[str, str]], instruction: str) -> list[dict[str, str]]:
    """Append the schema to the (first) system message, keeping the cacheable prefix stable."""
    out = [dict(m) for m in messages]
    for m in out:
        if m.get("role") == "system":
            m["content"] = f"{m.get('content') or ''}\n\n{instruction}"
            return out
    return [{"role": "system", "content": instruction}, *out]


@lru_cache(maxsize=256)
def _schema_of(type_: type) -> _Schema:
    name = type_.__name__
    raw = msgspec.json.schema(type_)
    defs = dict(raw.get("$defs", {}))
    plain = dict(defs.pop(name)) if raw.get("$ref") == f"#/$defs/{name}" else dict(raw)
    plain.pop("$ref", None)
    if f'"#/$defs/{name}"' in json.dumps(defs) or f'"#/$defs/{name}"' in json.dumps(plain):
        defs[name] = dict(plain)  # recursive: keep the root reachable by its ref
    if defs:
        plain["$defs"] = defs
    strict = _strict(plain) if plain.get("type") == "object" else None
    instruction = (
        f"Respond with one JSON object matching the JSON Schema named {name}, "
        f"and nothing else:\n{json.dumps(plain, separators=(',', ':'))}"
    )
    return _Schema(name, plain, strict, instruction)


class _NotStrict(Exception):
    pass


def _strict(schema: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of `schema` fit for OpenAI strict mode, or None where strict cannot express it.

    Strict mode wants every object closed (`additionalProperties: false`) with all
    properties required; optional fields stay nullable through their own anyOf.
    A free-form mapping (dict field) cannot be closed, so such schemas go non-strict.
    """
    try:
        return cast(dict[str, Any], _close(schema))
    except _NotStrict:
        return None


def _close(node: Any) -> Any:
    if isinstance(node, list):
        return [_close(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "$defs"):
            out[key] = {k: _close(v) for k, v in value.items()}
        elif key == "additionalProperties" and value is not False:
            raise _NotStrict(key)
        elif key not in _STRICT_DROP:
            out[key] = _close(value)
    if node.get("type") == "object":
        out["properties"] = out.get("properties", {})
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out
