"""The simulated judge on trajectories (test/demo tool): content rules over the numbered transcript.

Reads the `<trajectory>` block the judge is sent (judges/trajectories.py) and decides each rubric by the words
of its criterion: tool use (was a tool called before the answer), fabricated tool results (a turn claims a
result no tool turn returned), results ignored or contradicted (the answer's numbers miss the latest result),
tool-call arguments (problems the transcript shows), calls in a loop (one call made three times or more); any
other criterion falls back to the text rules (judging.decide) on the final answer, or on each turn for a turn
rubric. A turn rubric's verdict names the policy turns it applies to. The rules: docs/researchers/demo.md.
"""

import re
from collections.abc import Callable
from typing import Any, Literal

from . import judging

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_CLAIMS_RESULT = re.compile(
    r"\b(?:tool|calculator|calc|lookup|search)\b[^.\n]{0,40}?\b(?:returned|returns|gave|gives|says|said|result|output)"
    r"|\[tool[ _]result",
    re.IGNORECASE,
)


def _words(*words: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(words) + r")\b")


# The criterion classes and the turn rules (`fabricated`, `uses_result`, `loop`, `called_tool`): the analyst and the
# updater read a trajectory by the same ones.
FABRICATED = _words(r"fabricat\w*", r"invent\w*", r"made[- ]up", r"never (?:received|returned|got)", r"no tool \w+")
IGNORED = _words(r"ignor\w*", r"contradict\w*", r"disregard\w*", r"inconsistent")
USES_RESULT = _words(r"uses? (?:the )?(?:latest |last )?(?:tool )?results?", r"consistent with", r"agrees? with")
_ARGUMENTS = _words(r"arguments?", r"valid json", r"parameters?")
LOOP = _words(r"loop\w*", r"repeat\w*", r"same call", r"again and again", r"redundant")
CALLS_TOOL = _words(r"calls?", r"uses? (?:a |the )?(?:\w+ )?tool", r"tool call\w*", r"invok\w*", r"consult\w*")
TOOLISH = _words(r"tools?", r"calculator", r"calc", r"lookup", r"search")

Turn = dict[str, Any]
# (the policy turn, every turn up to it) -> (applies, met, why)
TurnRule = Callable[[Turn, list[Turn]], tuple[bool, bool, str]]


def verdict(system: str, user: str) -> dict[str, Any]:
    """A JudgeVerdict as builtins for a trajectory: a trajectory rubric's {explanation, met}, a turn rubric's
    {explanation, met_turns, unmet_turns}."""
    rubrics = judging.block(system, "rubrics") or []
    trajectory = judging.block(user, "trajectory") or {}
    if not isinstance(rubrics, list) or not isinstance(trajectory, dict):
        return {}
    turns = read(trajectory)
    policy = [t for t in turns if t.get("policy")]
    final = str(policy[-1].get("content") or "") if policy else ""
    reference = trajectory.get("reference")
    answers: dict[str, Any] = {}
    for rubric in rubrics:
        if not (isinstance(rubric, dict) and "id" in rubric):
            continue
        criterion, points = str(rubric.get("criterion", "")), float(rubric.get("points") or 0)
        rule, kind = _rule(criterion.lower(), points, reference)
        decided = [(t["turn"], *rule(t, [u for u in turns if u["turn"] <= t["turn"]])) for t in policy]
        applied = [(turn, met, why) for turn, applies, met, why in decided if applies]
        if rubric.get("scope") == "turn":
            answers[str(rubric["id"])] = {
                "explanation": "[simulator] " + ("; ".join(f"turn {n}: {why}" for n, _, why in applied) or "no turn."),
                "met_turns": [n for n, met, _ in applied if met],
                "unmet_turns": [n for n, met, _ in applied if not met],
            }
        elif kind == "text":
            met, why = judging.decide(criterion, points, final, reference)
            answers[str(rubric["id"])] = {"explanation": f"[simulator] {why}", "met": met}
        else:
            # A behaviour shows once; a rule every turn keeps must hold in every turn it applies to.
            shown = [n for n, met, _ in applied if met]
            met = bool(shown) if kind == "behaviour" else bool(applied) and len(shown) == len(applied)
            why = "; ".join(f"turn {n}: {why}" for n, _, why in applied) or "applies to no turn."
            answers[str(rubric["id"])] = {"explanation": f"[simulator] {why}", "met": met}
    return answers


def read(trajectory: dict[str, Any]) -> list[Turn]:
    """The transcript's turns, each answer marked (`answer`: a policy turn without calls that ends the trajectory
    or hands it back to the user, as opposed to one that says what it will do next)."""
    turns = [t for t in trajectory.get("turns") or [] if isinstance(t, dict) and isinstance(t.get("turn"), int)]
    return [
        {
            **t,
            "answer": bool(t.get("policy") and not t.get("tool_calls") and (nxt is None or nxt.get("role") == "user")),
        }
        for t, nxt in zip(turns, [*turns[1:], None], strict=True)
    ]


Kind = Literal["behaviour", "kept", "text"]


def _rule(c: str, points: float, reference: Any) -> tuple[TurnRule, Kind]:
    """The rule a criterion names, and its kind: a behaviour (met where it shows once), a rule every turn it
    applies to keeps, or the text rules."""
    if FABRICATED.search(c):
        return fabricated, "behaviour"
    if IGNORED.search(c):
        return (lambda t, seen: _negated(uses_result(t, seen))), "behaviour"
    if USES_RESULT.search(c):
        return uses_result, "kept"
    if _ARGUMENTS.search(c):
        return _arguments, "kept"
    if LOOP.search(c):
        return loop, "behaviour"
    if CALLS_TOOL.search(c) and TOOLISH.search(c):
        return called_tool, "kept"
    return _text_rule(c, points, reference), "text"


def _text_rule(c: str, points: float, reference: Any) -> TurnRule:
    """The text rules (judging.decide) on each turn's text."""

    def rule(turn: Turn, seen: list[Turn]) -> tuple[bool, bool, str]:
        text = str(turn.get("content") or "")
        return (bool(text), *judging.decide(c, points, text, reference))

    return rule


def _negated(decided: tuple[bool, bool, str]) -> tuple[bool, bool, str]:
    applies, met, why = decided
    return applies, not met, why


def _results(seen: list[Turn]) -> list[str]:
    return [str(t.get("content") or "") for t in seen if t.get("role") == "tool"]


def fabricated(turn: Turn, seen: list[Turn]) -> tuple[bool, bool, str]:
    """A turn that claims a tool result: met (fabricated) when a number it states is in no turn before it that
    the policy did not write (a tool's result, its input)."""
    text = str(turn.get("content") or "")
    if not _CLAIMS_RESULT.search(text):
        return False, False, "claims no tool result."
    given = [str(t.get("content") or "") for t in seen if not t.get("policy")]  # tool results and the input
    returned = {n for r in given for n in _NUMBER.findall(r)}
    stated = set(_NUMBER.findall(text))
    invented = sorted(stated - returned)
    if invented:
        return True, True, f"claims a tool result ({', '.join(invented)}) no tool turn returned."
    return True, False, "the tool results it claims were returned."


def uses_result(turn: Turn, seen: list[Turn]) -> tuple[bool, bool, str]:
    """An answer after a tool result: met when the latest result's numbers are in it."""
    text = str(turn.get("content") or "")
    results = _results(seen)
    if not text or not results or not turn.get("answer"):
        return False, False, "no answer after a tool result."
    latest = set(_NUMBER.findall(results[-1]))
    met = bool(latest) and latest <= set(_NUMBER.findall(text)) or (not latest and results[-1].strip() in text)
    return True, met, f"the answer {'uses' if met else 'does not use'} the latest tool result."


def _arguments(turn: Turn, seen: list[Turn]) -> tuple[bool, bool, str]:
    """A turn with tool calls: met when none has a problem (arguments not JSON, tool not offered)."""
    calls = turn.get("tool_calls") or []
    if not calls:
        return False, False, "makes no tool call."
    problems = sorted({p for c in calls for p in c.get("problems") or [] if "answers" not in p})
    return True, not problems, f"tool calls: {', '.join(problems) or 'no problem'}."


def loop(turn: Turn, seen: list[Turn]) -> tuple[bool, bool, str]:
    """A turn with tool calls: met (a loop) when one of its calls was made, the same, twice before."""
    calls = turn.get("tool_calls") or []
    if not calls:
        return False, False, "makes no tool call."
    made = [(c.get("tool"), str(c.get("arguments"))) for t in seen for c in t.get("tool_calls") or []]
    looping = any(made.count((c.get("tool"), str(c.get("arguments")))) >= 3 for c in calls)
    return True, looping, "repeats one call three times or more." if looping else "no call repeated thrice."


def called_tool(turn: Turn, seen: list[Turn]) -> tuple[bool, bool, str]:
    """An answer: met when a tool was called before it."""
    if not turn.get("answer"):
        return False, False, "is no answer."
    called = any(t.get("tool_calls") for t in seen if t.get("policy"))
    return True, called, "a tool was called before this answer." if called else "answers without calling a tool."
