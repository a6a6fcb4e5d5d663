"""How an endpoint is asked for a schema, and how its answer is read: pure, no I/O.

One request shape per dialect (`output_mode`: `json_schema`, `json_object_schema`, `guided_json`, `format`,
`json_object`, `text`), and the probe `auto` uses to find the first one an endpoint enforces.
Which server speaks which: docs/operators/real-model.md, "How the schema is enforced".
"""

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, TypeVar, cast

import json_repair
import msgspec

from rubricd import wire
from rubricd_services.llm.errors import Retryable, clip
from rubricd_services.settings import LLMSettings

T = TypeVar("T")

ENFORCING = ("json_schema", "json_object_schema", "guided_json", "format")  # the server holds the model to it
DIALECTS = (*ENFORCING, "json_object", "text")  # in the order `auto` tries them
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


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """What `auto` (LLMClient.detect) and `rubricd endpoint` ask for: no model writes this unless the server holds
    it to the schema (or, in the json_object and text dialects, the schema is shown to it)."""

    rubricd_probe: Literal["k7q2"]


PROBE_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Say hello."},
]


# Just the fields of a reply the LLM client reads; msgspec skips the rest.
class _TokenDetails(msgspec.Struct):
    cached_tokens: int | None = 0


class TokenUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _TokenDetails | None = None


class _Message(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class ChatReply(msgspec.Struct):
    choices: list[_Choice]
    usage: TokenUsage | None = None


class _Embedding(msgspec.Struct):
    index: int
    embedding: list[float]


class EmbeddingReply(msgspec.Struct):
    data: list[_Embedding]
    usage: TokenUsage | None = None


@dataclass(slots=True)
class Tokens:
    """What one call's replies used, summed over its attempts."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0  # prompt tokens the provider served from its prefix cache

    @classmethod
    def of(cls, usage: TokenUsage) -> "Tokens":
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        return cls(usage.prompt_tokens, usage.completion_tokens, cached or 0)

    def add(self, other: "Tokens") -> None:
        self.prompt += other.prompt
        self.completion += other.completion
        self.cached += other.cached


@dataclass(frozen=True, slots=True)
class Schema:
    name: str
    plain: dict[str, Any]  # as msgspec writes it, root inlined
    strict: dict[str, Any] | None  # fit for OpenAI strict mode, or None if impossible
    instruction: str  # the sentence json_object / text modes add to the system message


def request(
    s: LLMSettings, schema: Schema, messages: list[dict[str, str]]
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


def decode(content: str, type_: type[T], *, tolerant: bool) -> T:
    """Validate `content` as `type_`; tolerant mode digs JSON out of fences, prose and near-JSON."""
    try:
        return wire.decode(content, type_)
    except msgspec.ValidationError as e:
        raise Retryable(f"invalid output: {clip(e, 120)}") from None
    except msgspec.DecodeError:
        if not tolerant:
            raise Retryable("malformed output: not JSON") from None
    fenced = re.search(r"```(?:json)?\s*(.*?)```", content, re.S)
    text = fenced.group(1) if fenced else content
    start, end = text.find("{"), text.rfind("}")
    text = text[start : end + 1] if 0 <= start < end else text
    try:
        return msgspec.convert(json_repair.loads(text), type_)
    except (msgspec.ValidationError, ValueError, TypeError) as e:
        raise Retryable(f"malformed output: {clip(e, 120)}") from None


def answer(reply: ChatReply, type_: type[T], output_mode: str) -> T:
    """A chat reply's answer as `type_`; Retryable where it has none or was cut at its max_tokens."""
    if not reply.choices:
        raise Retryable("reply without choices")
    if reply.choices[0].finish_reason == "length":
        raise Retryable("truncated output (finish_reason=length)")
    return decode(reply.choices[0].message.content or "", type_, tolerant=output_mode not in ENFORCING)


def _with_instruction(messages: list[dict[str, str]], instruction: str) -> list[dict[str, str]]:
    """Append the schema to the (first) system message, keeping the cacheable prefix stable."""
    out = [dict(m) for m in messages]
    for m in out:
        if m.get("role") == "system":
            m["content"] = f"{m.get('content') or ''}\n\n{instruction}"
            return out
    return [{"role": "system", "content": instruction}, *out]


@lru_cache(maxsize=256)
def schema_of(type_: type) -> Schema:
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
    return Schema(name, plain, strict, instruction)


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
