"""What the simulator answers (test/demo tool): schema-valid JSON for every agent.

The requested Struct is named by `response_format.json_schema.name`, or, in
json_object / text modes, by the "JSON Schema named <Name>" sentence the
LLM client appends to the system message (the schema follows it as JSON). The
judge (`JudgeVerdict`, a group's `GroupVerdict`) gets content heuristics (see `judging`, `trajectories`); any other
schema gets a minimal valid instance built from the schema itself, with
strings taken from the conversation.
"""

import json
import math
import re
from collections.abc import Callable
from typing import Any

from rubricd_services.runtime import prompts

from . import analysis, generating, judging, pairwise, trajectories, updates


def judge(system: str, user: str) -> Any:
    """The judge's verdict on a trajectory (its block in the user message) or on a text rollout."""
    return (trajectories if "<trajectory>" in user else judging).verdict(system, user)


def judge_group(system: str, user: str) -> Any:
    """The judge's verdicts on a group, by label: each response judged as it would be alone (the simulator's
    rules read one response; side by side changes nothing for them)."""
    group = judging.block(user, "group") or {}
    if not isinstance(group, dict):
        return {}
    verdicts = {}
    for response in group.get("responses") or []:
        if not isinstance(response, dict) or "label" not in response:
            continue
        if response.get("turns") is not None:
            turns = [*(group.get("prompt_turns") or []), *response["turns"]]
            alone = {"tools": group.get("tools") or [], "turns": turns, "reference": group.get("reference")}
            verdicts[str(response["label"])] = judge(system, prompts.block("trajectory", alone))
        else:
            text = {"prompt": group.get("prompt") or "", "response": response.get("response") or ""}
            alone = {**text, "reference": group.get("reference")}
            verdicts[str(response["label"])] = judge(system, prompts.block("rollout", alone))
    return verdicts


# Agents with content-dependent answers: schema name -> fn(system text, user text) -> JSON value.
# Every other schema gets a generic valid instance.
AGENTS: dict[str, Callable[[str, str], Any]] = {
    "JudgeVerdict": judge,
    "GroupVerdict": judge_group,
    "PairwiseVerdict": pairwise.verdict,
    "AnalysisDraft": analysis.analysis,
    "SummaryDraft": analysis.summary,
    "MemoryQueries": updates.queries,
    "UpdateProposal": updates.proposal,
    "RubricDraft": generating.draft,
}

_NAMED = re.compile(r"JSON Schema named ([A-Za-z0-9_-]{1,64})")
WORD = re.compile(r"[A-Za-z0-9']+")
_FORMATS = {
    "date-time": "1970-01-01T00:00:00Z",
    "date": "1970-01-01",
    "time": "00:00:00Z",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "email": "sim@example.com",
    "uri": "https://example.com/sim",
}


def text_of(message: dict[str, Any]) -> str:
    """A message's text, also when content comes as a list of parts."""
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def refusal(body: dict[str, Any], dialects: list[str]) -> str | None:
    """Why a server that honours only `dialects` refuses this request, as llama-cpp-python's does; None if not."""
    kind = (body.get("response_format") or {}).get("type")
    if kind in ("json_schema", "json_object") and kind not in dialects:
        allowed = " or ".join(repr(k) for k in ("text", "json_object") if k in dialects)
        return f"1 validation error: response_format.type: Input should be {allowed or repr('text')}"
    return None


def requested_schema(
    body: dict[str, Any], system: str, dialects: list[str] | tuple[str, ...] = ()
) -> tuple[str | None, dict[str, Any] | None]:
    """(name, JSON Schema) the caller asked for, or (None, None) for free text. A schema sent in a way not in
    `dialects` is not enforced (ignored, as a server ignores a field it does not know)."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        return spec.get("name"), spec.get("schema")
    for dialect, schema in (
        ("json_object_schema", fmt.get("schema") if fmt.get("type") == "json_object" else None),
        ("guided_json", body.get("guided_json")),
        ("format", body.get("format")),
    ):
        if isinstance(schema, dict) and dialect in dialects:
            return schema.get("title"), schema
    match = _NAMED.search(system)
    if not match:
        return None, None
    start = system.find("{", match.end())
    try:
        schema, _ = json.JSONDecoder().raw_decode(system, start) if start >= 0 else (None, 0)
    except ValueError:
        schema = None
    return match.group(1), schema if isinstance(schema, dict) else None


def answer(body: dict[str, Any], dialects: list[str] | tuple[str, ...] = ()) -> tuple[str, str]:
    """(content, schema name or "text") for a chat completion request to a server honouring `dialects`."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = "\n".join(text_of(m) for m in messages if m.get("role") in ("system", "developer"))
    user = "\n".join(text_of(m) for m in messages if m.get("role") == "user")
    name, schema = requested_schema(body, system, dialects)
    if name in AGENTS:
        return json.dumps(AGENTS[name](system, user)), name
    words = WORD.findall(re.sub(r"</?\w+>|\\u003c", " ", user))[:8] or ["simulated"]
    if schema is not None:
        return json.dumps(instance(schema, words)), name or "schema"
    if (body.get("response_format") or {}).get("type") == "json_object":
        return json.dumps({"answer": " ".join(words)}), name or "json_object"
    return f"Simulated answer about: {' '.join(words)}", "text"


def instance(schema: dict[str, Any], words: list[str]) -> Any:
    """A minimal instance of `schema`, its strings made from `words`."""
    return _make(schema, schema.get("$defs", {}), schema, words, 0)


def _make(node: dict[str, Any], defs: dict[str, Any], root: dict[str, Any], words: list[str], depth: int) -> Any:
    if "$ref" in node:
        ref = node["$ref"]
        return _make(root if ref == "#" else defs[ref.rsplit("/", 1)[-1]], defs, root, words, depth + 1)
    if "const" in node:
        return node["const"]
    if node.get("enum"):
        return node["enum"][0]
    options = node.get("anyOf") or node.get("oneOf")
    if options:  # the null option is always the minimal valid one
        nullable = [o for o in options if o.get("type") == "null"]
        return None if nullable else _make(options[0], defs, root, words, depth + 1)
    kind = node.get("type", "string")
    if isinstance(kind, list):
        kind = "null" if "null" in kind else kind[0]
    if kind == "object":
        props = node.get("properties", {})
        return {k: _make(props[k], defs, root, words, depth + 1) for k in node.get("required", []) if k in props}
    if kind == "array":
        return _array(node, defs, root, words, depth)
    if kind in ("integer", "number"):
        return _number(node, kind == "integer")
    if kind == "boolean":
        return False
    return None if kind == "null" else _string(node, words)


def _array(node: dict[str, Any], defs: dict[str, Any], root: dict[str, Any], words: list[str], depth: int) -> list[Any]:
    if "prefixItems" in node:
        return [_make(item, defs, root, words, depth + 1) for item in node["prefixItems"]]
    items = node.get("items", {})
    n = node.get("minItems", 0)
    if n == 0 and items.get("type") == "string" and node.get("maxItems", 1) > 0 and depth < 8:
        n = 1  # a list of strings gets one content-derived entry
    return [_make(items, defs, root, words, depth + 1) for _ in range(n)]


def _number(node: dict[str, Any], integer: bool) -> int | float:
    step = 1 if integer else 1e-6
    lo = node.get("minimum", node.get("exclusiveMinimum", None))
    hi = node.get("maximum", node.get("exclusiveMaximum", None))
    lo = None if lo is None else lo + (step if "exclusiveMinimum" in node else 0)
    hi = None if hi is None else hi - (step if "exclusiveMaximum" in node else 0)
    value = (lo + hi) / 2 if lo is not None and hi is not None else lo if lo is not None else min(0, hi or 0)
    if not integer:
        return float(value)
    rounded = math.ceil(value)
    return math.floor(hi) if hi is not None and rounded > hi else rounded


def _string(node: dict[str, Any], words: list[str]) -> str:
    if node.get("format") in _FORMATS:
        return _FORMATS[node["format"]]
    lo, hi = node.get("minLength", 0), node.get("maxLength", 10_000)
    pattern = node.get("pattern")
    for candidate in (" ".join(words), "-".join(words[:4]).lower(), "sim", "a", "0"):
        candidate = (candidate + "x" * lo)[: max(lo, min(hi, len(candidate)))]
        if not pattern or re.search(pattern, candidate):
            return candidate
    return "sim"
