"""How a trajectory rollout is shown to the judge: a numbered transcript, as data.

Beside rollouts.py (a text rollout). Every turn keeps its trajectory index (`turn`) and role; the policy's turns
say so; a tool call shows its tool and arguments under a label (its id, else `<turn>.<k>`), and a tool turn the
label of the call it answers; the offered tools are listed once. What the policy got wrong is shown plainly,
never rejected: arguments that are not JSON, a tool that was not offered, a call no tool turn answers. Reasoning
is shown only when asked. It all goes in one `<trajectory>` block, escaped as rollout data is (prompts.block).

Fitting a prompt budget cuts tool outputs first, then drops the earliest turns (before the first user turn, the
tools' descriptions and parameters), then cuts the remaining texts; each cut is marked; the policy's final
answer is never cut.
"""

from dataclasses import dataclass
from typing import Any

import msgspec

from rubricd.messages import Rollout, RubricSet, trajectories
from rubricd_services.runtime import prompts

from . import rollouts

_FRAME_CHARS = 40  # the block's tags and the object's keys around the turns
MIN_TOOL_OUTPUT = 200  # what is left of a tool output cut to fit, before turns are dropped
TOOLS_CUT = "the tools' descriptions and parameters left out to fit the judge's prompt"


class _CallView(msgspec.Struct, frozen=True, omit_defaults=True):
    call: str
    tool: str
    arguments: Any
    problems: list[str] = []


class _TurnView(msgspec.Struct, frozen=True, omit_defaults=True):
    turn: int
    role: str
    policy: bool = False
    reasoning: str | None = None
    content: str = ""
    tool_calls: list[_CallView] = []
    answers: str | None = None  # a tool turn: the label of the call it answers
    tool: str | None = None  # a tool turn: the tool that answered


class _Cut(msgspec.Struct, frozen=True):
    cut: str


class _ToolView(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


class _TrajectoryView(msgspec.Struct, frozen=True, omit_defaults=True):
    tools: list[_ToolView]  # first: the judge reads what was offered before what was called
    turns: list[_TurnView | _Cut]
    reference: str | None = None


def system_message(template: str, rubric_set: RubricSet) -> str:
    """Instructions plus the rubric list with each rubric's scope: identical for every trajectory of a version."""
    return rollouts.system_message(template, rubric_set, scoped=True)


def rollout_chars(system: str, prompt_chars: int | None) -> int | None:
    """What is left of the judge's prompt budget (LLMSettings.prompt_chars) for the trajectory beside `system`."""
    return None if prompt_chars is None else max(prompt_chars - len(system), _FRAME_CHARS * 10)


@dataclass(frozen=True)
class Transcript:
    """A trajectory as the judge reads it: the turns shown and the offered tools."""

    turns: list[_TurnView]
    tools: list[_ToolView]
    reference: str | None

    def block(self, max_chars: int | None = None) -> str:
        view = _TrajectoryView(self.tools, list(self.turns), self.reference)
        if max_chars is not None:
            view = _fit(view, max_chars - _FRAME_CHARS)
        return prompts.block("trajectory", view)


def transcript(rollout: Rollout, reasoning: bool = False) -> Transcript:
    """The numbered transcript of `rollout`'s trajectory; `reasoning`: show the turns' reasoning."""
    policy = set(rollout.policy_turns)
    answered = trajectories.answers(rollout.trajectory)
    calls: dict[int, list[_CallView]] = {}
    for made in trajectories.tool_calls(rollout.trajectory, rollout.tools):
        view = _CallView(made.label, made.call.function.name, made.call.function.arguments, list(made.problems))
        calls.setdefault(made.turn, []).append(view)
    turns = [
        _TurnView(
            turn=i,
            role=turn.role,
            policy=i in policy,
            reasoning=turn.reasoning if reasoning and turn.reasoning else None,
            content=turn.text,
            tool_calls=calls.get(i, []),
            answers=answered.get(i),
            tool=turn.name if turn.role == "tool" else None,
        )
        for i, turn in enumerate(rollout.trajectory)
    ]
    tools = [_ToolView(t.function.name, t.function.description, t.function.parameters) for t in rollout.tools]
    return Transcript(turns, tools, rollout.reference)


def user_message(rollout: Rollout, max_chars: int | None = None, reasoning: bool = False) -> str:
    """The trajectory as data; with `max_chars`, cut to fit (the cuts marked)."""
    return transcript(rollout, reasoning).block(max_chars)


def messages(
    system: str, rollout: Rollout, max_chars: int | None = None, reasoning: bool = False
) -> list[dict[str, str]]:
    """The chat messages for one judge call of a trajectory."""
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user_message(rollout, max_chars, reasoning)},
    ]


def _size(obj: object) -> int:
    return len(prompts.as_data(obj))


def _fit(view: _TrajectoryView, budget: int) -> _TrajectoryView:
    """`view` cut to take at most `budget` characters, in order: tool outputs (to MIN_TOOL_OUTPUT each), the
    earliest turns (all but the policy's final answer and the first user turn), the offered tools' descriptions
    and parameters (their names stay), the first user turn, the remaining texts. What cannot be cut (the final
    answer) is kept whole even where it alone is over the budget."""
    turns = [t for t in view.turns if isinstance(t, _TurnView)]
    fixed = _size(msgspec.structs.replace(view, turns=[])) + 2
    sizes = [_size(t) + 1 for t in turns]
    if fixed + sum(sizes) <= budget:
        return view
    final = max((k for k, t in enumerate(turns) if t.policy), default=len(turns) - 1)
    # 1. Tool outputs, cut to one common size (no less than MIN_TOOL_OUTPUT).
    tools = [k for k, t in enumerate(turns) if t.role == "tool" and k != final]
    over = fixed + sum(sizes) - budget
    outputs = [prompts.size(turns[k].content) for k in tools]
    room = max(sum(outputs) - over, MIN_TOOL_OUTPUT * len(tools))
    for k, text in zip(tools, prompts.fit([turns[k].content for k in tools], room), strict=True):
        turns[k] = msgspec.structs.replace(turns[k], content=text)
        sizes[k] = _size(turns[k]) + 1
    # 2. The earliest turns, dropped whole; the first user turn last (before it, the tools' descriptions and
    # parameters: the question matters more), the final answer never.
    first_user = next((k for k, t in enumerate(turns) if t.role == "user"), None)
    order = [k for k in range(len(turns)) if k not in (final, first_user)] + (
        [first_user] if first_user is not None and first_user != final else []
    )
    dropped: set[int] = set()
    marker = _size(_Cut("turns 0000-0000 left out to fit the judge's prompt")) + 1
    bare = False  # the tools shown by name only

    def used() -> int:
        shown = sum(sizes[j] for j in range(len(turns)) if j not in dropped)
        return fixed + shown + (marker if dropped else 0) + (_size(_Cut(TOOLS_CUT)) + 1 if bare else 0)

    for k in order:
        if used() <= budget:
            break
        if k == first_user and not bare and any(t.description or t.parameters for t in view.tools):
            view = msgspec.structs.replace(view, tools=[_ToolView(t.name) for t in view.tools])
            fixed, bare = _size(msgspec.structs.replace(view, turns=[])) + 2, True
            if used() <= budget:
                break
        dropped.add(k)
    kept = [t for k, t in enumerate(turns) if k not in dropped]
    # 3. What is left (not the final answer) cut to share what room remains.
    if (over := used() - budget) > 0:
        others = [t for t in kept if t.turn != turns[final].turn]
        texts = prompts.fit([t.content for t in others], max(0, sum(prompts.size(t.content) for t in others) - over))
        cut_texts = {t.turn: text for t, text in zip(others, texts, strict=True)}
        kept = [msgspec.structs.replace(t, content=cut_texts.get(t.turn, t.content)) for t in kept]
    shown: list[_TurnView | _Cut] = list(kept)
    if dropped:
        gone = sorted(turns[k].turn for k in dropped)
        at = next((n for n, t in enumerate(kept) if t.turn > gone[0]), len(kept))
        shown.insert(at, _Cut(f"{_ranges(gone)} left out to fit the judge's prompt"))
    if bare:
        shown.insert(0, _Cut(TOOLS_CUT))
    return msgspec.structs.replace(view, turns=shown)


def _ranges(turns: list[int]) -> str:
    """`[0, 1, 2, 5]` -> "turns 0-2, 5"."""
    spans: list[list[int]] = []
    for t in turns:
        if spans and t == spans[-1][1] + 1:
            spans[-1][1] = t
        else:
            spans.append([t, t])
    return "turns " + ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)
