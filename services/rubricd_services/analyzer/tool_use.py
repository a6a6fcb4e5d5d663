"""What a trajectory's policy did with its tools, counted from its turns and its Score (pure).

Facts, not judgements: the policy's tool calls that no tool turn answers, that call a tool not offered or whose
arguments are not JSON (the shared reading of a trajectory, messages.trajectories.tool_calls), one call made LOOP
times or more, no call at all where tools were offered, and how many of the policy's turns each turn rubric
failed. Each fact is one sentence naming its turns: the analyst is shown them, and the analysis keeps them among
its observations, where summaries aggregate them.
"""

import json
from typing import Any

from rubricd.messages import Rollout, Score
from rubricd.messages.trajectories import NOT_JSON, NOT_OFFERED, UNANSWERED, tool_calls
from rubricd_services.runtime import prompts

LOOP = 3  # one call (the same tool with the same arguments) made this many times is a loop
_SHOWN_ARGUMENTS = 80  # a looping call's arguments, cut to this in its sentence
# What the policy got wrong in a call (CallMade.problems), as a fact's head.
_PROBLEMS = {
    UNANSWERED: "Calls no tool turn answers",
    NOT_OFFERED: "Calls to tools not offered",
    NOT_JSON: "Calls whose arguments are not valid JSON",
}


def facts(rollout: Rollout, score: Score) -> list[str]:
    """The tool-use facts of `rollout`'s trajectory and its `score`, one sentence each; none for a text rollout."""
    if not rollout.trajectory:
        return []
    policy = rollout.policy_turns
    calls = [c for c in tool_calls(rollout.trajectory, rollout.tools) if c.turn in policy]
    offered = [t.function.name for t in rollout.tools]
    tools = sorted({c.call.function.name for c in calls})
    lines = [
        f"Tool use: policy turns {_list(policy)}; {len(calls)} tool call{'' if len(calls) == 1 else 's'}"
        f"{f' ({_list(tools)})' if tools else ''}; tools offered: {_list(offered) or 'none'}."
    ]
    if offered and not calls:
        lines.append("No tool call: the policy answered without calling any of the offered tools.")
    for problem, head in _PROBLEMS.items():
        found = [f"turn {c.turn} {c.call.function.name} (call {c.label})" for c in calls if problem in c.problems]
        if found:
            lines.append(f"{head}: {', '.join(found)}.")
    made: dict[tuple[str, str], list[int]] = {}
    for c in calls:
        made.setdefault((c.call.function.name, _arguments(c.call.function.arguments)), []).append(c.turn)
    for (tool, arguments), at in made.items():
        if len(at) >= LOOP:
            shown = prompts.cut(arguments, _SHOWN_ARGUMENTS)
            lines.append(f"The same call made {len(at)} times: {tool}({shown}) at turns {_list(at)}.")
    for r in score.results:
        if r.met_turns or r.unmet_turns:
            failing = r.unmet_turns if r.points > 0 else r.met_turns
            judged = len(set(r.met_turns) | set(r.unmet_turns))
            where = f": turns {_list(sorted(failing))}" if failing else ""
            lines.append(f"Turn rubric {r.rubric_id} ({r.points:+g}) fails at {len(failing)} of {judged} turns{where}.")
    return lines


def _arguments(arguments: Any) -> str:
    """A call's arguments in one spelling, so that the same call written twice compares equal."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments.strip()
    return json.dumps(arguments, sort_keys=True)


def _list(items: list[Any]) -> str:
    return ", ".join(str(i) for i in items)
