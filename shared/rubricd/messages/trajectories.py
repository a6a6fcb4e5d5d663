"""A rollout as a conversation: turns in OpenAI's chat format, with tool calls, tool results and reasoning.

A turn's `content` may be a string, a list of parts (only the text parts are judged), or null or empty beside
`tool_calls`. A tool call's `arguments` are a JSON string (OpenAI's) or an object (TRL's); its `id` is optional
(TRL sends none). A tool turn answers an earlier call by `tool_call_id` (OpenAI) or by the tool's `name` (TRL).
What the policy got wrong inside a well-formed turn (arguments that are not JSON, a tool never offered, a call
left unanswered) is no wire error: `tool_calls` names it for whoever shows a trajectory (the judge, the
dashboard, the analyst), and it is judged.
"""

import json
from typing import Annotated, Any, Literal, NamedTuple

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


# What the policy got wrong in a call, in the words every reader of a trajectory uses.
NOT_JSON = "its arguments are not valid JSON"
NOT_OFFERED = "this tool was not offered"
UNANSWERED = "no tool turn answers this call"


class CallMade(NamedTuple):
    """One tool call of a trajectory: the turn that made it, its label (its id, else `<turn>.<k>`), the call, the
    tool turn that answers it (None: none), and what the policy got wrong in it."""

    turn: int
    label: str
    call: ToolCall
    answer: int | None
    problems: tuple[str, ...]


def answers(turns: list[Turn]) -> dict[int, str]:
    """Each tool turn's index -> the label of the call it answers: the call with its `tool_call_id`; without one,
    the oldest open call of the tool it names, else the oldest open call."""
    open_calls: list[tuple[str, str, str | None]] = []  # (label, tool, id), oldest first
    answered: dict[int, str] = {}
    for i, turn in enumerate(turns):
        open_calls += [(c.id or f"{i}.{k}", c.function.name, c.id) for k, c in enumerate(turn.tool_calls)]
        if turn.role != "tool":
            continue
        for label, tool, call_id in open_calls:
            if turn.tool_call_id is not None and call_id != turn.tool_call_id:
                continue
            if turn.tool_call_id is None and turn.name is not None and tool != turn.name:
                continue
            open_calls.remove((label, tool, call_id))
            answered[i] = label
            break
    return answered


def tool_calls(turns: list[Turn], tools: list[Tool]) -> list[CallMade]:
    """Every tool call of `turns`, in order, with its answer and its problems (a tool not offered only where
    `tools` lists the offered ones)."""
    offered = {t.function.name for t in tools}
    answered = {label: turn for turn, label in answers(turns).items()}
    made = []
    for i, turn in enumerate(turns):
        for k, call in enumerate(turn.tool_calls):
            label = call.id or f"{i}.{k}"
            problems = (
                *([NOT_JSON] if not _is_json(call.function.arguments) else []),
                *([NOT_OFFERED] if offered and call.function.name not in offered else []),
                *([UNANSWERED] if label not in answered else []),
            )
            made.append(CallMade(i, label, call, answered.get(label), problems))
    return made


def _is_json(arguments: str | dict[str, Any]) -> bool:
    if not isinstance(arguments, str):
        return True
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True
