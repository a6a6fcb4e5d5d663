"""Chat messages, the prompts and completions trainers send, as rubricd reads them: as plain text (`text`),
rubricd's one text form, or as a trajectory's turns (`turns`).

A message may be OpenAI's, TRL's or verl's: `content` a string, a list of parts, empty or None beside
`tool_calls` (`{"function": {"name", "arguments"}}`, the arguments a JSON string or an object, the id optional), a
`tool` message naming its tool or the call it answers. In text, tool calls are written `[tool_call
name(arguments)]`, so the judge sees which tool was called with what, and a tool's answer is labelled with the tool.
"""

import json
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from .messages.trajectories import Turn, Turns, malformed

# Where trainers put an assistant message's reasoning: OpenAI-compatible servers (vLLM's `reasoning_content`,
# later `reasoning`), TRL's parsed responses (`reasoning_content`, Gemma's and gpt-oss's `thinking`).
REASONING_KEYS = ("reasoning", "reasoning_content", "thinking")


class NotTurns(ValueError):
    """Messages that cannot be a trajectory's turns; the message names the turn and the field
    (`trajectory[i].field`), as a rollout refused at intake would."""


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


def turns(messages: Iterable[Any], prompt_turns: int = 0) -> list[Turn]:
    """Conversational messages as a trajectory's turns (`prompt_turns`: how many lead in as the policy's input).

    Lenient where trainers are: content None or empty beside tool calls, arguments a JSON string or an object,
    calls without ids, a tool message answering by id or by name, the reasoning under any of REASONING_KEYS.
    Raises NotTurns where a rollout carrying them would be refused: an unknown role, a wrong type, a tool message
    answering no earlier call, a tool call on a message that is not the assistant's.
    """
    try:
        converted = msgspec.convert([_with_reasoning(m) for m in messages], Turns)
    except msgspec.ValidationError as e:
        raise NotTurns(str(e).replace("`$[", "`trajectory[")) from None
    if (why := malformed(converted, prompt_turns)) is not None:
        raise NotTurns(why)
    return converted


def _with_reasoning(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message  # refused by the conversion, naming the turn
    reasoning = next((message[k] for k in REASONING_KEYS if message.get(k)), None)
    return {**message, "reasoning": reasoning}
