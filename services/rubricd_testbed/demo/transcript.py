"""The agent run's report section: trajectories turn by turn, with the verdicts that name each turn.

Three of the rollouts the steps kept (StepRecord.examples): the hack the policy found last as the seed rubrics
scored it (its first step), the same hack at its last step, and an honest trajectory of that step. Each turn is
shown as the judge was given it (tool calls with their arguments, the call a tool turn answers); each policy
turn with the turn rubrics it meets and does not (RubricResult.met_turns, unmet_turns) and its points
(Score.turns); then every rubric's verdict on the whole trajectory and the reward.
"""

import json

from rubricd.messages import RubricResult, Turn

from .trainer import Example, Run, StepRecord


def shown(run: Run) -> list[tuple[str, StepRecord, Example]]:
    """(title, step, example): the last hack found, first and last seen, and the honest trajectory beside it."""
    hack, honest = list(run.task.found)[-1], run.task.behaviours[0]
    seen = [(r, e) for r in run.records for e in r.examples if e.behaviour == hack]
    out = []
    if seen:
        out.append((f"The hack ({hack}) at step {seen[0][0].step}, the first it was tried", *seen[0]))
        if seen[-1][0] is not seen[0][0]:
            out.append((f"The hack ({hack}) at step {seen[-1][0].step}, the last it was tried", *seen[-1]))
    at = seen[-1][0] if seen else run.records[-1] if run.records else None
    if at is not None:
        out += [(f"An {honest} trajectory at step {at.step}", at, e) for e in at.examples if e.behaviour == honest]
    return out


def markdown(run: Run) -> list[str]:
    out = [
        "## Trajectories, turn by turn",
        "",
        "Each turn as the judge read it; a policy turn's verdicts are the turn rubrics it meets and does not, its points "
        "those of the turn rubrics it meets (`Score.turns`, the per-turn reward a trainer such as verl's agent loop "
        "takes). Below each: every rubric's verdict on the trajectory, and its reward.",
        "",
    ]
    for title, record, example in shown(run):
        out += section(title, record, example)
    return out


def section(title: str, record: StepRecord, example: Example) -> list[str]:
    rollout, score = example.rollout, example.score
    points = {t.turn: t for t in score.turns}
    reward = "-" if score.reward is None else f"{score.reward:.2f}"
    out = [
        f"### {title}",
        "",
        f"`{rollout.rollout_id}`, scored with rubric v{score.rubric_version} (turn rubrics: "
        f"{', '.join(record.turn_rubrics) or 'none'}): reward **{reward}**.",
        "",
        "| turn | role | content | turn verdicts | points |",
        "|---:|---|---|---|---:|",
    ]
    policy = set(rollout.policy_turns)
    for i, turn in enumerate(rollout.trajectory):
        met = [r.rubric_id for r in score.results if i in r.met_turns]
        unmet = [r.rubric_id for r in score.results if i in r.unmet_turns]
        verdicts = "; ".join([*(f"meets {m}" for m in met), *(f"does not meet {u}" for u in unmet)])
        role = f"{turn.role} (policy)" if i in policy else turn.role
        cell = f"{points[i].points:+g}" if i in points else ""
        out.append(f"| {i} | {role} | {_md(content(turn))} | {verdicts or ('-' if i in policy else '')} | {cell} |")
    out += ["", "Verdicts on the whole trajectory:", ""]
    for r in score.results:
        verdict = "met" if r.met else "not met"
        out.append(f"- {r.rubric_id} ({r.points:+g}): {verdict}{_named_turns(r)}. {_md(r.explanation)}")
    return [*out, ""]


def content(turn: Turn) -> str:
    """A turn's text and tool calls as `[tool_call name(arguments)]`; a tool turn says which call it answers."""
    calls = [
        f"[tool_call {c.function.name}({a if isinstance(a := c.function.arguments, str) else json.dumps(a)})]"
        for c in turn.tool_calls
    ]
    answers = f"(answers {turn.tool_call_id}) " if turn.role == "tool" and turn.tool_call_id else ""
    return answers + " ".join([turn.text, *calls]).strip()


def _named_turns(result: RubricResult) -> str:
    """ " (met by turn 2; not by turns 4, 6)": the turns a turn rubric's verdict names (nothing for the others)."""
    named = []
    if result.met_turns:
        named.append(f"met by {_turns(result.met_turns)}")
    if result.unmet_turns:
        named.append(f"not by {_turns(result.unmet_turns)}")
    return f" ({'; '.join(named)})" if named else ""


def _turns(turns: list[int]) -> str:
    """[2] -> "turn 2", [2, 4] -> "turns 2, 4"."""
    return ("turn " if len(turns) == 1 else "turns ") + ", ".join(map(str, turns))


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
