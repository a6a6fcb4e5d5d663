"""Chat messages as plain text: the prompts and completions trainers send, in rubricd's one text form.

A message may be OpenAI's or TRL's: `content` a string, a list of parts, empty or None beside `tool_calls`
(`{"function": {"name", "arguments"}}`, the arguments a JSON string or an object), a `tool` message naming its
tool or the call it answers. Tool calls are written `[tool_call name(arguments)]`, so the judge sees which tool
was called with what, and a tool's answer is labelled with the tool.
"""

import json
from typing import Any


def text(value: Any, roles: bool = True) -> str:
    """Plain text of a prompt or completion: a string, or conversational messages. Without `roles`, a single
    message is its text alone (several keep their roles: who said what is the content then)."""
    if isinstance(value, str):
        return value
    messages = list(value)
    if not roles and len(messages) == 1:
        return _body(messages[0])
    return "\n\n".join(f"{_speaker(m)}: {_body(m)}" for m in messages)


def _speaker(message: dict[str, Any]) -> str:
    role = str(message.get("role") or "user")
    if role == "tool":
        tool = message.get("name") or message.get("tool_call_id")
        return f"tool {tool}" if tool else role
    return role


def _body(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if not isinstance(content, str):  # multimodal content: keep the text parts
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    calls = [_call(c) for c in message.get("tool_calls") or []]
    return "\n".join(part for part in (content, *calls) if part)


def _call(call: Any) -> str:
    function = (call.get("function") if isinstance(call, dict) else None) or {}
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"[tool_call {function.get('name', '?')}({arguments})]"
