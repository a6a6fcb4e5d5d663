"""A Responses-API exchange (OpenAI's, as NeMo Gym posts it to /verify) as a trajectory: turns, tools offered,
and how many turns were the policy's input.

The request's `instructions` (a system turn) and `input` (a string: one user turn; or a list of items) are the
prompt turns; the response's `output` items follow, in order:
- `message`: a turn of its role, its text parts (`input_text`, `output_text`, `refusal`) as its text;
- `reasoning`: the reasoning of the assistant turn it opens (its summary's text, else its content's);
- `function_call` (`call_id`, `name`, `arguments` as written), `custom_tool_call`, `mcp_call`: a tool call of
  the assistant turn; consecutive calls share one turn. A hosted tool's call (`web_search_call`, ...) is a call
  of the tool its type names (`web_search`), with what it asked (`action`, `code` or `queries`) as arguments;
- `function_call_output` (`call_id`, `output`) and every `*_call_output`: a tool turn answering that call (an
  `mcp_call` holds its own output: it answers itself);
- `mcp_list_tools`, `additional_tools`: more tools offered;
- any other item (an approval request, an item reference, compaction): left out.
An assistant turn holds, in OpenAI's chat order, its reasoning, its text, then its tool calls: an item that would
come before what the turn already holds opens the next one. The request's `tools` (flat function tools
`{type: "function", name, description, parameters}`, custom tools, hosted tools by type) are the tools offered.

An item that cannot be read as a message (not an object, an unknown role, a call without a name, an output
answering no earlier call) raises ValueError naming it: `response.output[3].call_id: ...`. What the policy got
wrong inside a well-formed item (arguments that are not JSON, a tool never offered) is kept, to be judged.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from rubricd.messages.trajectories import Function, FunctionSpec, Part, Tool, ToolCall, Turn

ROLES = ("system", "developer", "user", "assistant")
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
_ASKED = ("action", "code", "queries")  # what a hosted tool's call asked of the tool
REASONING, TEXT, CALLS = 0, 1, 2  # the order of an assistant turn's parts


@dataclass
class Trajectory:
    """What a Rollout carries of an agent's episode."""

    turns: list[Turn] = field(default_factory=list)
    tools: list[Tool] = field(default_factory=list)
    prompt_turns: int = 0


def trajectory(params: dict[str, Any], response: dict[str, Any]) -> Trajectory:
    """The exchange's trajectory: `params` the request (`responses_create_params`), `response` the Response."""
    built = _Builder()
    instructions = params.get("instructions")
    if isinstance(instructions, str) and instructions:
        built.turns.append(Turn(role="system", content=instructions))
    given = params.get("input", "")
    if isinstance(given, str):
        built.turns.append(Turn(role="user", content=given))
    else:
        built.read(given, "responses_create_params.input")
    built.close()
    prompt_turns = len(built.turns)
    built.read(response.get("output", []), "response.output")
    built.close()
    if not built.turns:
        raise ValueError("responses_create_params.input, response.output: no message, call or output to judge")
    offered = [*_tools(params.get("tools") or [], "responses_create_params.tools"), *built.tools]
    return Trajectory(turns=built.turns, tools=offered, prompt_turns=prompt_turns)


@dataclass
class _Assistant:
    """The assistant turn being read."""

    reasoning: list[str] = field(default_factory=list)
    content: str | list[Part] | None = None
    calls: list[ToolCall] = field(default_factory=list)
    holds: int = REASONING


class _Builder:
    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.tools: list[Tool] = []
        self.open: _Assistant | None = None
        self.call_ids: set[str] = set()

    def read(self, items: Any, where: str) -> None:
        if not isinstance(items, list):
            raise ValueError(f"{where}: a list of items, not {_kind(items)}")
        for i, item in enumerate(items):
            self.item(item, f"{where}[{i}]")

    def item(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise ValueError(f"{where}: an item is an object, not {_kind(item)}")
        kind = item.get("type") or "message"  # an easy input message has no type
        if not isinstance(kind, str):
            raise ValueError(f"{where}.type: a string, not {_kind(kind)}")
        if kind == "message":
            self.message(item, where)
        elif kind == "reasoning":
            if text := _reasoning(item):
                self.assistant(REASONING).reasoning.append(text)
        elif kind.endswith("_call_output"):
            self.answer(item, where)
        elif kind.endswith("_call"):
            self.call(kind, item, where)
        elif kind in ("mcp_list_tools", "additional_tools"):
            self.tools += _tools(item.get("tools") or [], f"{where}.tools")

    def message(self, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        if role not in ROLES:
            raise ValueError(f"{where}.role: {role!r} is not a role ({', '.join(ROLES)})")
        content = _content(item.get("content"), f"{where}.content")
        if role == "assistant":
            self.assistant(TEXT).content = content
        else:
            self.close()
            self.turns.append(Turn(role=role, content=content))

    def call(self, kind: str, item: dict[str, Any], where: str) -> None:
        call_id = item.get("call_id") or item.get("id")
        if kind in ("function_call", "custom_tool_call", "mcp_call"):
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where}.name: a {kind} names its tool")
            arguments = item.get("arguments", item.get("input", ""))
        else:  # a hosted tool's call
            name = kind.removesuffix("_call")
            arguments = next((item[k] for k in _ASKED if k in item), {})
        if not isinstance(arguments, str | dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = call_id if isinstance(call_id, str) else None
        self.assistant(CALLS).calls.append(ToolCall(id=call_id, function=Function(name=name, arguments=arguments)))
        if call_id is not None:
            self.call_ids.add(call_id)
        if kind == "mcp_call" and call_id is not None and (item.get("output") or item.get("error")):
            self.close()
            self.turns.append(Turn(role="tool", tool_call_id=call_id, content=str(item.get("output") or item["error"])))

    def answer(self, item: dict[str, Any], where: str) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or call_id not in self.call_ids:
            raise ValueError(f"{where}.call_id: {call_id!r} answers no earlier call")
        self.close()
        self.turns.append(Turn(role="tool", tool_call_id=call_id, content=_content(item.get("output"), where)))

    def assistant(self, part: int) -> _Assistant:
        """The assistant turn that takes `part` next: the open one, or a new one if the open one holds what comes
        after it (or its text already)."""
        if self.open is None or part < self.open.holds or part == self.open.holds == TEXT:
            self.close()
            self.open = _Assistant()
        self.open.holds = part
        return self.open

    def close(self) -> None:
        if self.open is not None:
            self.turns.append(
                Turn(
                    role="assistant",
                    content=self.open.content,
                    tool_calls=self.open.calls,
                    reasoning="\n\n".join(self.open.reasoning) or None,
                )
            )
            self.open = None


def _reasoning(item: dict[str, Any]) -> str:
    """A reasoning item's text: its summary's, else its content's (none if it is encrypted only)."""
    for key in ("summary", "content"):
        parts = item.get(key)
        if isinstance(parts, list):
            text = "\n\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
            if text:
                return text
    return ""


def _content(value: Any, where: str) -> str | list[Part] | None:
    """A message's or an output's content: a string as is; a list of parts as their text joined where every part
    holds text, else as parts (those without text kept, not judged); a single part (a screenshot) as a list."""
    if value is None or isinstance(value, str):
        return value
    given = [value] if isinstance(value, dict) else value
    if not isinstance(given, list):
        raise ValueError(f"{where}: a string or a list of parts, not {_kind(value)}")
    parts = []
    for j, part in enumerate(given):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ValueError(f"{where}[{j}]: a part is an object with a type")
        text = part.get(_TEXT_PARTS.get(part["type"], ""))
        parts.append(Part(type="text", text=text) if isinstance(text, str) else Part(type=part["type"]))
    if all(p.type == "text" for p in parts):
        return "".join(p.text or "" for p in parts)
    return parts


def _tools(given: Any, where: str) -> list[Tool]:
    """The tools offered: a function (flat, as the Responses API has it, or nested, as Chat Completions has it),
    a custom or MCP-listed tool by its name, a hosted tool by its type (`web_search`)."""
    if not isinstance(given, list):
        raise ValueError(f"{where}: a list of tools, not {_kind(given)}")
    out = []
    for i, tool in enumerate(given):
        if not isinstance(tool, dict):
            raise ValueError(f"{where}[{i}]: a tool is an object, not {_kind(tool)}")
        spec = tool["function"] if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name") or tool.get("type")
        if not isinstance(name, str) or not name or tool.get("type") == "mcp":  # an MCP server: its tools are listed
            continue
        parameters = spec.get("parameters") or spec.get("input_schema") or {}
        description = spec.get("description") or ""
        out.append(
            Tool(
                function=FunctionSpec(
                    name=name,
                    description=description if isinstance(description, str) else "",
                    parameters=parameters if isinstance(parameters, dict) else {},
                )
            )
        )
    return out


_KINDS: dict[type, str] = {str: "a string", list: "a list", dict: "an object", type(None): "null"}


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)
