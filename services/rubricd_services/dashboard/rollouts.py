"""One kept rollout as the page shows it: its score and verdicts, and for a trajectory its turns, numbered.

Built here from the wire types (the dashboard imports no judge), with the judge's words: turn numbers are
trajectory indices; the policy's turns say so; a tool call is labelled by its id, else `<turn>.<k>`, and a
tool turn by the label of the call it answers; what the policy got wrong is named, never hidden (arguments
that are not JSON, a tool not offered, a call no tool turn answers). Beside each turn: the verdicts that name
it (RubricResult.met_turns, unmet_turns) and its points (Score.turns). Every text is the rollout's as it came:
the page writes it as text, never as HTML.
"""

import json
from typing import Any

from rubricd.messages import Rollout, Score, ScoredRollout, Turn

NOT_JSON = "its arguments are not valid JSON"
NOT_OFFERED = "this tool was not offered"
UNANSWERED = "no tool turn answers this call"


def view(kept: ScoredRollout) -> dict[str, Any]:
    """The rollout, its score and every verdict; `trajectory` (empty for a text rollout) turn by turn."""
    rollout, score = kept.rollout, kept.score
    return {
        "run_id": rollout.run_id,
        "rollout_id": rollout.rollout_id,
        "step": rollout.step,
        "evaluation": rollout.evaluation,
        "status": str(score.status),
        "reward": score.reward,
        "rubric_version": score.rubric_version,
        "policy": score.policy,
        "error": score.error,
        "judge_cached": score.judge_cached,
        "prompt": rollout.prompt,
        "response": rollout.response,
        "reference": rollout.reference,
        "prompt_turns": rollout.prompt_turns,
        "trajectory": turns(rollout, score),
        "tools": [
            {"name": t.function.name, "description": t.function.description, "parameters": t.function.parameters}
            for t in rollout.tools
        ],
        "results": [
            {
                "rubric_id": r.rubric_id,
                "met": r.met,
                "points": r.points,
                "explanation": r.explanation,
                "met_turns": r.met_turns,
                "unmet_turns": r.unmet_turns,
            }
            for r in score.results
        ],
        "turns": [{"turn": t.turn, "points": t.points, "met": t.met, "unmet": t.unmet} for t in score.turns],
    }


def turns(rollout: Rollout, score: Score) -> list[dict[str, Any]]:
    """Each turn of the trajectory with its tool calls, the call it answers, the verdicts naming it and its
    points (None where the score has no result for it)."""
    policy = set(rollout.policy_turns)
    offered = {t.function.name for t in rollout.tools}
    answers = calls_answered(rollout.trajectory)
    answered = set(answers.values())
    points = {t.turn: t.points for t in score.turns}
    shown = []
    for i, turn in enumerate(rollout.trajectory):
        calls = []
        for k, call in enumerate(turn.tool_calls):
            label = call.id or f"{i}.{k}"
            problems = [
                *([NOT_JSON] if not _is_json(call.function.arguments) else []),
                *([NOT_OFFERED] if offered and call.function.name not in offered else []),
                *([UNANSWERED] if label not in answered else []),
            ]
            arguments = _arguments(call.function.arguments)
            calls.append({"call": label, "tool": call.function.name, "arguments": arguments, "problems": problems})
        shown.append(
            {
                "turn": i,
                "role": turn.role,
                "policy": i in policy,
                "name": turn.name,
                "content": turn.text,
                "reasoning": turn.reasoning,
                "tool_calls": calls,
                "answers": answers.get(i),
                "verdicts": [
                    {"rubric_id": r.rubric_id, "met": met, "points": r.points, "explanation": r.explanation}
                    for r in score.results
                    for met, named in ((True, r.met_turns), (False, r.unmet_turns))
                    if i in named
                ],
                "points": points.get(i),
            }
        )
    return shown


def calls_answered(trajectory: list[Turn]) -> dict[int, str]:
    """Each tool turn's index -> the label of the call it answers, as the judge pairs them: the call with its
    `tool_call_id`; without one, the oldest open call of the tool it names, or the oldest open call."""
    open_calls: list[tuple[str, str, str | None]] = []  # (label, tool, id), oldest first
    answers: dict[int, str] = {}
    for i, turn in enumerate(trajectory):
        open_calls += [(c.id or f"{i}.{k}", c.function.name, c.id) for k, c in enumerate(turn.tool_calls)]
        if turn.role != "tool":
            continue
        for call in open_calls:
            label, tool, call_id = call
            if turn.tool_call_id is not None and call_id != turn.tool_call_id:
                continue
            if turn.tool_call_id is None and turn.name is not None and tool != turn.name:
                continue
            open_calls.remove(call)
            answers[i] = label
            break
    return answers


def _arguments(arguments: str | dict[str, Any]) -> str:
    """The arguments as the policy wrote them: a JSON string as is, an object (TRL's) as JSON."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _is_json(arguments: str | dict[str, Any]) -> bool:
    if not isinstance(arguments, str):
        return True
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True
