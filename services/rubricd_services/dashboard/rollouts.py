"""One kept rollout as the page shows it: its score and verdicts (with the votes' agreement on each, when judged by
votes; its group, and how it was judged with it), and for a trajectory its turns, numbered.

Built here from the wire types (the dashboard imports no judge), in the words of messages.trajectories: turn
numbers are
trajectory indices; the policy's turns say so; a tool call is labelled by its id, else `<turn>.<k>`, and a
tool turn by the label of the call it answers; what the policy got wrong is named, never hidden (arguments
that are not JSON, a tool not offered, a call no tool turn answers). Beside each turn: the verdicts that name
it (RubricResult.met_turns, unmet_turns) and its points (Score.turns). Every text is the rollout's as it came:
the page writes it as text, never as HTML.
"""

import json
from typing import Any

from rubricd.messages import Rollout, Score, ScoredRollout, trajectories


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
        "group": rollout.group,
        "grouping": None
        if score.grouping is None
        else {"members": score.grouping.members, "label": score.grouping.label, "positions": score.grouping.positions},
        "votes": score.votes,
        "agreement": score.agreement,
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
                "agreement": r.agreement,
            }
            for r in score.results
        ],
        "turns": [{"turn": t.turn, "points": t.points, "met": t.met, "unmet": t.unmet} for t in score.turns],
    }


def turns(rollout: Rollout, score: Score) -> list[dict[str, Any]]:
    """Each turn of the trajectory with its tool calls, the call it answers, the verdicts naming it and its
    points (None where the score has no result for it)."""
    policy = set(rollout.policy_turns)
    answers = trajectories.answers(rollout.trajectory)
    calls: dict[int, list[dict[str, Any]]] = {}
    for made in trajectories.tool_calls(rollout.trajectory, rollout.tools):
        calls.setdefault(made.turn, []).append(
            {
                "call": made.label,
                "tool": made.call.function.name,
                "arguments": _arguments(made.call.function.arguments),
                "problems": list(made.problems),
            }
        )
    points = {t.turn: t.points for t in score.turns}
    return [
        {
            "turn": i,
            "role": turn.role,
            "policy": i in policy,
            "name": turn.name,
            "content": turn.text,
            "reasoning": turn.reasoning,
            "tool_calls": calls.get(i, []),
            "answers": answers.get(i),
            "verdicts": [
                {"rubric_id": r.rubric_id, "met": met, "points": r.points, "explanation": r.explanation}
                for r in score.results
                for met, named in ((True, r.met_turns), (False, r.unmet_turns))
                if i in named
            ],
            "points": points.get(i),
        }
        for i, turn in enumerate(rollout.trajectory)
    ]


def _arguments(arguments: str | dict[str, Any]) -> str:
    """The arguments as the policy wrote them: a JSON string as is, an object (TRL's) as JSON."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
