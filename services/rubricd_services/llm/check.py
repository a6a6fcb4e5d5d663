"""What an OpenAI-compatible endpoint serves and honours, found by asking it, and the settings that follow from
it for every agent: `rubricd endpoint` (docs/operators/real-model.md).

`probe` asks (models, context window, slots, each dialect, length bounds, latency alone and at once, a shared
prefix twice); `recommend` is pure: findings and the agents' settings in, settings out, each with its reason.
"""

import asyncio
import math
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec
import openai

from rubricd_services.llm.dialects import (
    DIALECTS,
    ENFORCING,
    PROBE_MESSAGES,
    ChatReply,
    Probe,
    TokenUsage,
    answer,
    request,
    schema_of,
)
from rubricd_services.llm.errors import Retryable, clip
from rubricd_services.settings import MIN_PROMPT_TOKENS, LLMSettings


class Bounded(msgspec.Struct, kw_only=True):
    """A string bound far below what the prompt asks for: only a server holding the model to `maxLength` keeps
    it (llama-server's grammar); one that does not lets the model run on."""

    text: Annotated[str, msgspec.Meta(max_length=12)]


class Prose(msgspec.Struct, kw_only=True):
    text: Annotated[str, msgspec.Meta(max_length=2000)]


BOUNDED_MESSAGES = [{"role": "user", "content": "Describe the sea in three long sentences, in the field text."}]
PROSE_MESSAGES = [{"role": "user", "content": "Write a long paragraph about the sea, in the field text."}]
# A system message several calls share, about 1,500 tokens: above the 1,024 a hosted prefix cache starts at.
PREFIX = " ".join(f"Rule {i}: a grader reads the whole response before it scores rubric {i}." for i in range(90))


@dataclass
class Findings:
    base_url: str
    model: str
    models: list[str]
    context_tokens: int | None = None  # one request's window, as the server says it
    context_from: str | None = None  # which field said it
    slots: int | None = None  # requests it serves at once, as it says (llama-server's total_slots)
    dialects: dict[str, str | None] = field(default_factory=dict)  # each output_mode: None if it works, else why not
    bounds_held: bool | None = None  # json_schema, whole schema: a maxLength held
    concurrency: int = 4
    latency_s: float | None = None  # the median of one call alone
    latency_at_once_s: float | None = None  # the median of `concurrency` calls at once
    wall_at_once_s: float | None = None  # the time `concurrency` calls at once took together
    tokens_per_s: float | None = None  # one call's answer tokens a second, its prompt included
    prompt_tokens: int | None = None  # the shared-prefix call's prompt, the second time
    cached_tokens: int | None = None  # of it, served from the prefix cache (None: the reply does not say)
    rpm: int | None = None  # x-ratelimit-limit-requests
    tpm: int | None = None  # x-ratelimit-limit-tokens

    @property
    def output_mode(self) -> str | None:
        """The first dialect that works, in the order `auto` tries them."""
        return next((mode for mode in DIALECTS if mode in self.dialects and self.dialects[mode] is None), None)

    @property
    def at_once(self) -> float | None:
        """About how many calls the endpoint served at once: `concurrency` calls' single-call time over their wall."""
        if self.latency_s is None or not self.wall_at_once_s:
            return None
        return min(self.concurrency, self.concurrency * self.latency_s / self.wall_at_once_s)


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    why: str


class Unreachable(Exception):
    """The endpoint did not answer, or does not serve the model asked for."""


async def probe(s: LLMSettings, *, model: str | None = None, concurrency: int = 4, calls: int = 3) -> Findings:
    """Ask the endpoint of `s` (its base_url and api_key) what it serves and honours, for `model` (None: the
    model of `s` where it serves that, else the one model it serves)."""
    client = openai.AsyncOpenAI(base_url=s.base_url, api_key=s.api_key.get_secret_value(), max_retries=0)
    try:
        return await _probe(client, s, model, concurrency, calls)
    finally:
        await client.close()


async def _probe(
    client: openai.AsyncOpenAI, s: LLMSettings, model: str | None, concurrency: int, calls: int
) -> Findings:
    try:
        listed = (await client.get("/models", cast_to=object))["data"]  # type: ignore[index]
    except (openai.APIError, KeyError, TypeError) as e:
        raise Unreachable(f"GET {s.base_url}/models: {clip(e, 200)}") from None
    models = [str(m["id"]) for m in listed]
    if model is None:
        model = s.model if s.model in models or len(models) != 1 else models[0]
    if model not in models:
        raise Unreachable(f"{s.base_url} serves {models}, not {model!r}: say which with --model")
    found = Findings(s.base_url, model, models, concurrency=concurrency)
    found.context_tokens, found.context_from = _context(next(m for m in listed if m["id"] == model))
    found.slots = await _slots(client, s.base_url)
    s = s.model_copy(update={"model": model, "max_retries": 0})
    for dialect in DIALECTS:
        found.dialects[dialect] = await _refusal(client, s.model_copy(update={"output_mode": dialect}))
    mode = found.output_mode
    if mode is None:
        return found
    s = s.model_copy(update={"output_mode": mode})
    if mode == "json_schema":
        bounded = s.model_copy(update={"strict": False})
        found.bounds_held = await _refusal(client, bounded, Bounded, BOUNDED_MESSAGES, 64) is None
    alone = [(await _timed(client, s))[0] for _ in range(calls)]
    start = time.perf_counter()
    together = await asyncio.gather(*(_timed(client, s) for _ in range(concurrency)))
    found.wall_at_once_s = time.perf_counter() - start
    found.latency_s = statistics.median(alone)
    found.latency_at_once_s = statistics.median(t for t, _ in together)
    elapsed, reply = await _timed(client, s, Prose, PROSE_MESSAGES, 200, False)
    if reply.usage and reply.usage.completion_tokens:
        found.tokens_per_s = reply.usage.completion_tokens / elapsed
    room = (found.context_tokens or 4096) * 2  # characters of the window the shared prefix may fill
    shared = [{"role": "system", "content": PREFIX[: max(room, 400)]}, *PROBE_MESSAGES]
    await _timed(client, s, messages=shared)
    _, reply = await _timed(client, s, messages=shared)
    if reply.usage:
        found.prompt_tokens = reply.usage.prompt_tokens
        details = reply.usage.prompt_tokens_details
        found.cached_tokens = details.cached_tokens if details else None
    found.rpm, found.tpm = reply.rpm, reply.tpm
    return found


def _context(entry: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """One request's window, where the model's entry says it: vLLM's and SGLang's `max_model_len`, llama-server's
    `meta.n_ctx` (a slot's share of `-c`)."""
    if isinstance(entry.get("max_model_len"), int):
        return entry["max_model_len"], "max_model_len"
    meta = entry.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("n_ctx"), int):
        return meta["n_ctx"], "meta.n_ctx"
    return None, None


async def _slots(client: openai.AsyncOpenAI, base_url: str) -> int | None:
    """llama-server's `total_slots` (its --parallel) from /props beside /v1; None where there is no such page."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        props = await client.get(f"{root}/props", cast_to=object)
    except openai.APIError:
        return None
    slots = props.get("total_slots") if isinstance(props, dict) else None
    return slots if isinstance(slots, int) else None


@dataclass(frozen=True)
class _Reply:
    """A chat completion's usage and the rate limits its headers say."""

    usage: TokenUsage | None
    rpm: int | None
    tpm: int | None


async def _call(
    client: openai.AsyncOpenAI,
    s: LLMSettings,
    schema: type = Probe,
    messages: list[dict[str, str]] = PROBE_MESSAGES,
    max_tokens: int = 64,
    whole: bool = True,
) -> _Reply:
    """One call in the dialect of `s`, its answer decoded as `schema` (unless not `whole`: any answer, cut or
    not, will do); Retryable or openai's errors if it failed."""
    fields, sent = request(s, schema_of(schema), messages)
    raw = await client.chat.completions.with_raw_response.create(
        model=s.model,
        messages=sent,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=max_tokens,
        extra_body=fields,
        timeout=s.timeout_s,
    )
    reply = msgspec.json.decode(raw.content, type=ChatReply)  # read as the services' client reads it
    limits = _header(raw.headers, "x-ratelimit-limit-requests"), _header(raw.headers, "x-ratelimit-limit-tokens")
    if whole:
        answer(reply, schema, s.output_mode)
    return _Reply(reply.usage, *limits)


async def _refusal(client: openai.AsyncOpenAI, s: LLMSettings, *args: Any) -> str | None:
    """None if the call works in the dialect of `s`, else why not."""
    try:
        await _call(client, s, *args)
    except Retryable as e:
        return str(e)
    except openai.APIStatusError as e:
        return clip(e.message, 160)
    except openai.APIError as e:
        return clip(e, 160)
    return None


async def _timed(client: openai.AsyncOpenAI, s: LLMSettings, *args: Any, **kwargs: Any) -> tuple[float, _Reply]:
    start = time.perf_counter()
    try:
        reply = await _call(client, s, *args, **kwargs)
    except (Retryable, openai.APIError) as e:
        raise Unreachable(f"a call in {s.output_mode}, which worked once, failed: {clip(e, 200)}") from None
    return time.perf_counter() - start, reply


def _header(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name, "")
    return int(value) if value.isdigit() else None


def recommend(found: Findings, agents: Mapping[str, LLMSettings]) -> list[Setting]:
    """The settings `found` calls for: the endpoint's (RUBRICD_LLM__*), then each agent's where its own default
    does not fit (RUBRICD_AGENTS__<AGENT>__*). `agents`: each chat agent's settings as they are now."""
    mode = found.output_mode
    if mode is None:
        raise ValueError("no output_mode works: " + "; ".join(f"{m}: {why}" for m, why in found.dialects.items()))
    out = [
        Setting("RUBRICD_LLM__BASE_URL", found.base_url, "the endpoint"),
        Setting("RUBRICD_LLM__MODEL", found.model, f"served there (of {', '.join(found.models)})"),
        Setting("RUBRICD_LLM__OUTPUT_MODE", mode, _mode_why(found, mode)),
    ]
    if mode == "json_schema":
        held = bool(found.bounds_held)
        why = (
            "it holds the model to the whole schema, maxLength too: send it whole"
            if held
            else ("a maxLength in the whole schema was not held: send OpenAI's strict form (no bounds)")
        )
        out.append(Setting("RUBRICD_LLM__STRICT", "false" if held else "true", why))
    if found.context_tokens:
        out.append(Setting("RUBRICD_LLM__CONTEXT_TOKENS", str(found.context_tokens), f"its {found.context_from}"))
    if found.slots:
        out.append(Setting("RUBRICD_LLM__SHARED_SLOTS", str(found.slots), "its total_slots (/props)"))
    if found.rpm:
        out.append(Setting("RUBRICD_LLM__RPM", str(found.rpm), "its x-ratelimit-limit-requests"))
    if found.tpm:
        out.append(Setting("RUBRICD_LLM__TPM", str(found.tpm), "its x-ratelimit-limit-tokens"))
    for name, s in agents.items():
        out += _agent(found, name, s)
    return out


def _mode_why(found: Findings, mode: str) -> str:
    refused = [m for m in DIALECTS[: DIALECTS.index(mode)] if found.dialects.get(m)]
    said = "the first that works" + (f" ({', '.join(refused)} did not)" if refused else "")
    return said if mode in ENFORCING else said + "; no dialect enforces the schema: answers are parsed tolerantly"


def answer_s(found: Findings, max_tokens: int) -> float | None:
    """How long writing `max_tokens` takes at the speed measured, slowed as calls were at `concurrency` at once."""
    if not (found.tokens_per_s and found.latency_s and found.latency_at_once_s):
        return None
    return max_tokens / found.tokens_per_s * max(1.0, found.latency_at_once_s / found.latency_s)


def _agent(found: Findings, name: str, s: LLMSettings) -> list[Setting]:
    """An agent's max_tokens where its default leaves the prompt too little of the window, and its timeout where
    writing max_tokens at the speed measured (answer_s) would take more than two thirds of it."""
    prefix, out = f"RUBRICD_AGENTS__{name.upper()}__", []
    max_tokens = s.max_tokens or 0
    if found.context_tokens and max_tokens > found.context_tokens - MIN_PROMPT_TOKENS:
        max_tokens = max(256, found.context_tokens - MIN_PROMPT_TOKENS)
        why = f"its {s.max_tokens} would leave the prompt under {MIN_PROMPT_TOKENS} tokens of the window"
        out.append(Setting(prefix + "MAX_TOKENS", str(max_tokens), why))
    needed = answer_s(found, max_tokens) if max_tokens else None
    if needed is not None and needed * 1.5 > s.timeout_s:
        why = f"its {s.timeout_s:.0f} s: {max_tokens} answer tokens take about {needed:.0f} s here"
        out.append(Setting(prefix + "TIMEOUT_S", str(math.ceil(needed * 1.5 / 10) * 10), why))
    return out
