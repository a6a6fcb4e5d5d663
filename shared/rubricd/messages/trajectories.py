"""A rollout as a conversation: turns in OpenAI's chat format, with tool calls, tool results and reasoning.

A turn's `content` may be a string, a list of parts (only the text parts are judged), or null or empty beside
`tool_calls`. A tool call's `arguments` are a JSON string (OpenAI's) or an object (TRL's); its `id` is optional
(TRL sends none). A tool turn answers an earlier call by `tool_call_id` (OpenAI) or by the tool's `name` (TRL).
What the policy got wrong inside a well-formed turn (arguments that are not JSON, a tool never offered, a call
left unanswered) is not checked here: it is judged.
"""

from typing import Annotated, Any, Literal

import msgspec

MAX_TURNS = 1024
MAX_TOOL_CALLS = 128  # in one turn
MAX_TOOLS = 256  # offered
Role = Literal["system", "developer", "user", "assistant", "tool"]


class Part(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One part of a multimodal content list; parts other than text (images, audio) are kept but not judged."""

    type: str
    text: str | None = None


class Function(msgspec.Struct, frozen=True, kw_only=True):
    """The function a tool call calls: its name and its arguments as the policy wrote them."""

    name: str
    arguments: str | dict[str, Any] = ""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One tool call of an assistant turn."""

    function: Function
    id: str | None = None
    type: Literal["function"] = "function"


class Turn(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message of a trajectory."""

    role: Role
    content: str | list[Part] | None = None
    tool_calls: Annotated[list[ToolCall], msgspec.Meta(max_length=MAX_TOOL_CALLS)] = []
    tool_call_id: str | None = None  # a tool turn: the call it answers (OpenAI)
    name: str | None = None  # a tool turn: the tool that answered (TRL); another turn: its author's name
    reasoning: str | None = None  # an assistant turn's reasoning, where the model gave it apart from its answer

    @property
    def text(self) -> str:
        """The turn's text content (text parts joined)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return " ".join(p.text for p in self.content if p.type == "text" and p.text)


class FunctionSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An offered function: its name, what it does, and its parameters' JSON Schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


class Tool(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool offered to the policy (OpenAI's `tools` entries)."""

    function: FunctionSpec
    type: Literal["function"] = "function"


Turns = Annotated[list[Turn], msgspec.Meta(max_length=MAX_TURNS)]
Tools = Annotated[list[Tool], msgspec.Meta(max_length=MAX_TOOLS)]


def malformed(turns: list[Turn], prompt_turns: int) -> str | None:
    """Why `turns` is not a conversation as a message (a turn and its field named), or None.

    Only the message's shape: a tool call outside an assistant turn, a tool turn answering no earlier call,
    `prompt_turns` beyond the turns.
    """
    if prompt_turns > len(turns):
        return f"prompt_turns {prompt_turns} is beyond the trajectory's {len(turns)} turns"
    ids: set[str] = set()
    names: set[str] = set()
    calls = 0
    for i, turn in enumerate(turns):
        if turn.tool_calls and turn.role != "assistant":
            return f"trajectory[{i}].tool_calls: only an assistant turn calls tools (this one is {turn.role!r})"
        for call in turn.tool_calls:
            calls += 1
            names.add(call.function.name)
            if call.id is not None:
                ids.add(call.id)
        if turn.role != "tool":
            continue
        if turn.tool_call_id is not None and turn.tool_call_id not in ids:
            return f"trajectory[{i}].tool_call_id: {turn.tool_call_id!r} answers no earlier tool call"
        if turn.tool_call_id is None and turn.name is not None and turn.name not in names:
            return f"trajectory[{i}].name: no earlier turn called the tool {turn.name!r}"
        if not calls:
            return f"trajectory[{i}]: a tool turn answers no earlier tool call"
    return None
