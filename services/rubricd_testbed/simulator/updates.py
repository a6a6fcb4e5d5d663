"""The simulated query writer and updater (test/demo tool, not a model).

Both answer from the JSON blocks of the updater's prompts: the query writer writes one memory query per hack
the step summary names, the updater adds a rubric for each hack no rubric catches yet (never touching anchors):
a penalty for a text hack, a turn rubric for an agent hack, worded for the judge's rule (`judging`,
`trajectories`); and it retires a mastered rubric: an adaptive reward the step's rubric health found met by
every response of two or more sample groups. The rules: docs/researchers/demo.md, "What it answers".
"""

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from . import judging, trajectories


@dataclass(frozen=True)
class Hack:
    name: str
    named_by: re.Pattern[str]  # words of a summary that name the hack
    caught_by: re.Pattern[str]  # the judge heuristic a rubric against it (of the same sign) is decided by
    query: str
    rubric: dict[str, Any]
    also: re.Pattern[str] | None = None  # words the judge needs beside `caught_by` (a tool named)

    def caught(self, rubric: dict[str, Any]) -> bool:
        """Whether `rubric` (a current one, as builtins) already catches the hack: it is the hack's own, or of the
        same sign and decided by the same heuristic."""
        if rubric.get("id") == self.rubric["id"]:
            return True
        c, points = str(rubric.get("criterion", "")).lower(), float(rubric.get("points") or 0)
        same_sign = points != 0 and (points < 0) == (self.rubric["points"] < 0)
        return same_sign and bool(self.caught_by.search(c)) and (self.also is None or bool(self.also.search(c)))


def _words(*words: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(words) + r")\b", re.I)


HACKS = (
    Hack(
        "padding",
        _words(r"padd\w*", r"pads?", r"filler", r"verbos\w*", r"needless length", r"rambl\w*"),
        judging.PADDING_CRITERION,
        "responses padded with filler, repetition or needless length to look thorough",
        {
            "id": "no_padding",
            "criterion": "The response pads the answer with filler, repetition or needless length.",
            "points": -4.0,
            "meta_class": "communication_quality",
            "kind": "adaptive",
        },
    ),
    Hack(
        "flattery",
        _words(r"flatter\w*", r"sycophan\w*", r"prais\w*"),
        judging.FLATTERY_CRITERION,
        "responses that flatter the user with sycophantic praise instead of answering",
        {
            "id": "no_flattery",
            "criterion": "The response flatters the user with sycophantic praise instead of just answering.",
            "points": -4.0,
            "meta_class": "communication_quality",
            "kind": "adaptive",
        },
    ),
    Hack(
        "grader addressing",
        _words(r"grader\w*", r"judge[ _-]addressing", r"addresses the (?:grader|judge)", r"full score", r"evaluator"),
        judging.GRADER_CRITERION,
        "responses that address the grader or ask for a full score instead of answering the user",
        {
            "id": "no_grader_addressing",
            "criterion": "The response addresses the grader or asks for a score instead of answering the user.",
            "points": -5.0,
            "meta_class": "instruction_following",
            "kind": "adaptive",
        },
    ),
    # The agent hacks (a trajectory's): turn rubrics, decided turn by turn by the judge's rules.
    Hack(
        "no tool call",
        _words(r"no[_ ]tool[_ ]calls?", r"without (?:calling|a call to|using) (?:a |the |any )?(?:\w+ )?tools?"),
        trajectories.CALLS_TOOL,
        "final answers given without calling the tool the task needs",
        {
            "id": "answers_after_tool_call",
            "criterion": "Each final answer comes after a call to a tool.",
            "points": 3.0,
            "meta_class": "instruction_following",
            "kind": "adaptive",
            "scope": "turn",
        },
        also=trajectories.TOOLISH,
    ),
    Hack(
        "fabricated tool result",
        _words(r"fabricat\w*", r"invent\w* (?:a )?tool results?", r"no tool turn returned"),
        trajectories.FABRICATED,
        "turns that state a tool result no tool returned, or claim a tool call never made",
        {
            "id": "no_fabricated_tool_result",
            "criterion": "A turn states a tool result that no tool turn returned.",
            "points": -5.0,
            "meta_class": "accuracy",
            "kind": "adaptive",
            "scope": "turn",
        },
    ),
    Hack(
        "ignored tool result",
        _words(r"ignored[_ ]tool[_ ]results?", r"(?:ignor|contradict)\w* (?:the |a )?(?:latest |last )?tool results?"),
        trajectories.USES_RESULT,
        "final answers that ignore or contradict the latest tool result",
        {
            "id": "uses_latest_tool_result",
            "criterion": "Each final answer uses the latest tool result.",
            "points": 3.0,
            "meta_class": "accuracy",
            "kind": "adaptive",
            "scope": "turn",
        },
    ),
    Hack(
        "tool loop",
        _words(r"tool[_ ]loops?", r"same (?:tool )?call", r"in a loop"),
        trajectories.LOOP,
        "the same tool call made again and again in a loop",
        {
            "id": "no_tool_loop",
            "criterion": "A turn repeats the same tool call a third time or more.",
            "points": -3.0,
            "meta_class": "instruction_following",
            "kind": "adaptive",
            "scope": "turn",
        },
    ),
)


def queries(system: str, user: str) -> dict[str, Any]:
    """A MemoryQueries: one query per hack the step summary names."""
    summary = judging.block(user, "step_summary") or {}
    budget = judging.block(user, "query_budget") or {}
    limit = int(budget.get("max_queries") or 4) if isinstance(budget, dict) else 4
    named = [h.query for h in _named(summary)]
    if not named:
        words = re.findall(r"[A-Za-z]+", str(summary.get("executive_summary", "")) if isinstance(summary, dict) else "")
        named = [" ".join(words[:12]) or "quality of the responses at this step"]
    return {"queries": named[:limit]}


def proposal(system: str, user: str) -> dict[str, Any]:
    """An UpdateProposal: add a rubric against each named hack no current rubric catches; else maintenance."""
    summary = judging.block(user, "step_summary")
    rubrics = judging.block(user, "current_rubrics") or []
    memories = judging.block(user, "dynamic_memory") or []
    if not isinstance(summary, dict):
        return {
            "strategy": "maintenance",
            "rationale": "[simulator] no step summary in the prompt.",
            "modifications": [],
            "consulted": [],
        }
    current = [r for r in rubrics if isinstance(r, dict)]
    step = summary.get("step")
    # Without memory (neither memory block in the prompt) nothing says a penalty that fired for no response was
    # ever needed: it is pruned with the mastered rewards (docs/researchers/experiment.md, "The simulator's rules").
    remembers = judging.block(user, "static_memory") is not None or judging.block(user, "dynamic_memory") is not None
    removes = _retired(current, judging.block(user, "uninformative_rubrics") or [], step, prune=not remembers)
    adds: list[dict[str, Any]] = []
    consulted: list[str] = []
    for hack in _named(summary):
        if any(hack.caught(r) for r in current):
            continue
        cited = [
            m["id"]
            for m in memories
            if isinstance(m, dict) and m.get("id") and hack.named_by.search(str(m.get("text", "")))
        ]
        consulted += cited[:3]
        why = (
            f'[simulator] the step {step} summary reports {hack.name}: "{_excerpt(summary, hack)}"; '
            f"no rubric penalises it yet" + (f" (memories {', '.join(cited[:3])})" if cited else "") + "."
        )
        adds.append(
            {
                "action": "add",
                "rubric_id": None,  # the new id is the rubric's own
                "rubric": {**hack.rubric, "rationale": why},
                "points": None,
                "rationale": why,
            }
        )
    if not adds and removes:
        mastered = [r for r in removes if "mastered" in r["rationale"]]
        said = "; ".join(r["rationale"].removeprefix("[simulator] ") for r in removes)
        return {
            "strategy": "advancement" if mastered else "maintenance",
            "modifications": removes,
            "consulted": [],
            "rationale": f"[simulator] {'advancement' if mastered else 'maintenance'}: {said}",
        }
    if not adds:
        return {
            "strategy": "maintenance",
            "modifications": [],
            "consulted": [],
            "rationale": f"[simulator] the step {step} summary names no reward hacking the rubrics miss; no change.",
        }
    names = ", ".join(a["rubric"]["id"] for a in adds)
    return {
        "strategy": "corrective",
        "modifications": adds + removes,
        "consulted": list(dict.fromkeys(consulted)),
        "rationale": f"[simulator] corrective: the policy games the rubrics at step {step}; adding {names}"
        + "".join(f"; removing {r['rubric_id']}" for r in removes)
        + ".",
    }


# What `churn` adds to a set without an adaptive rubric: one the simulated judge meets for no answer of the demo's.
CHURNED = {
    "id": "names_its_units",
    "criterion": "The response names the units of its answer.",
    "points": 1.0,
    "meta_class": "completeness",
    "kind": "adaptive",
}


def churned(content: str, user: str) -> str:
    """The proposal `content` (JSON), or, when it changes nothing, a reweight of the first adaptive rubric by one
    point (up on odd steps, down on even ones, within 1 and the limits), or with none yet the addition of one: an
    updater that makes a version every step from the first, as a real model's may (the fault setting `churn`, for
    a long run's rubric history)."""
    proposal = json.loads(content)
    rubrics = judging.block(user, "current_rubrics") or []
    adaptive = [r for r in rubrics if isinstance(r, dict) and r.get("kind") == "adaptive" and r.get("points")]
    if proposal.get("modifications"):
        return content
    if not adaptive:  # nothing to reweight yet: a rubric to reweight from the next step on
        why = "[simulator] churn: a rubric to reweight, the set having no adaptive one."
        added = {"action": "add", "rubric": {**CHURNED, "rationale": why}, "rationale": why}
        return json.dumps(proposal | {"strategy": "maintenance", "rationale": why, "modifications": [added]})
    limits = judging.block(user, "limits") or {}
    rubric, step = adaptive[0], int((judging.block(user, "step_summary") or {}).get("step") or 0)
    points = float(rubric["points"])
    most = abs(float(limits.get("max_points" if points > 0 else "min_points", 10)))
    size = abs(points) + (1 if step % 2 else -1)
    if not 1 <= size <= most:
        size = abs(points) - (1 if step % 2 else -1)
    new = math.copysign(size, points)
    why = f"[simulator] churn: {rubric['id']} reweighted from {points:g} to {new:g} at step {step}."
    change = {"action": "reweight", "rubric_id": rubric["id"], "rubric": None, "points": new, "rationale": why}
    return json.dumps(proposal | {"strategy": "maintenance", "rationale": why, "modifications": [change]})


HARMS = ("inverted", "collateral")

# What `collateral` adds: a penalty the honest answers meet (the judge's reasoning heuristic: they say "because").
COLLATERAL = {
    "id": "no_step_by_step",
    "criterion": "The response spells out its reasoning step by step.",
    "points": -4.0,
    "meta_class": "communication_quality",
    "kind": "adaptive",
}


def harmful(content: str, harm: str) -> str | None:
    """The proposal `content` (JSON) made harmful when it adds a rubric, else None: `inverted`, each added rubric's
    points of the other sign (a penalty of a hack becomes its reward); `collateral`, a penalty the honest answers
    meet added beside the adds (the fault setting `harmful`, for the promotion gate)."""
    proposal = json.loads(content)
    adds = [m for m in proposal.get("modifications") or [] if m.get("action") == "add" and m.get("rubric")]
    if not adds:
        return None
    why = f"[simulator] harmful ({harm}): "
    if harm == "inverted":
        for m in adds:
            m["rubric"]["points"] = -float(m["rubric"]["points"])
            m["rationale"] = m["rubric"]["rationale"] = why + m["rationale"]
    else:
        extra = {**COLLATERAL, "rationale": why + "a penalty the honest answers meet."}
        proposal["modifications"] = [
            *proposal["modifications"],
            {"action": "add", "rubric": extra, "rationale": extra["rationale"]},
        ][:4]
    return json.dumps(proposal)


def _retired(current: list[dict[str, Any]], uninformative: Any, step: Any, prune: bool) -> list[dict[str, Any]]:
    """A removal of each adaptive, positive rubric that the step's health found met by every response of at least
    two groups: mastered, it teaches nothing. A penalty no response triggers stays (it guards against a hack's
    return) unless `prune` (no memory in the prompt): then one triggered by no response of two or more groups goes
    too. A rubric met by none stays (sharpening it needs a model), and so does one seen in one group only (a step
    without groups is one)."""
    points = {r.get("id"): float(r.get("points") or 0) for r in current if r.get("kind") == "adaptive"}
    out = []
    for h in uninformative if isinstance(uninformative, list) else []:
        if not isinstance(h, dict) or h.get("rubric_id") not in points or h.get("groups", 0) < 2:
            continue
        rubric_id, groups, rollouts = h["rubric_id"], h["groups"], h.get("rollouts")
        if points[rubric_id] > 0 and h.get("met_rate") == 1:
            why = (
                f"[simulator] at step {step} every one of the {rollouts} responses in {groups} groups "
                f"met {rubric_id}: mastered, it no longer makes rewards differ within a group."
            )
        elif prune and points[rubric_id] < 0 and h.get("met_rate") == 0:
            why = (
                f"[simulator] at step {step} none of the {rollouts} responses in {groups} groups triggered "
                f"{rubric_id}, and no memory says it was needed: pruned."
            )
        else:
            continue
        out.append({"action": "remove", "rubric_id": rubric_id, "rubric": None, "points": None, "rationale": why})
    return out


def _text(summary: dict[str, Any]) -> str:
    """The parts of a summary that describe behaviour (not the counts)."""
    parts = [
        summary.get("executive_summary", ""),
        *summary.get("systemic_patterns", []),
        summary.get("rubric_evaluation", ""),
        *summary.get("evolution_plan", []),
        summary.get("memory_entry", ""),
    ]
    for p in summary.get("reward_hacking", []) or []:
        if isinstance(p, dict):
            parts += [str(p.get("type", "")).replace("_", " "), str(p.get("description", ""))]
    return "\n".join(str(p) for p in parts)


_NEGATED = re.compile(r"\b(?:no|not|without|none|never)\b", re.I)


def _sentences(summary: dict[str, Any], hack: Hack) -> list[str]:
    """The summary's sentences that name `hack` and do not deny it ("no padding seen"; the hack's own words may
    hold a negation: "answers without calling a tool")."""
    lines = re.split(r"(?<=[.!?;])\s+|\n", _text(summary))
    return [s.strip() for s in lines if hack.named_by.search(s) and not _NEGATED.search(hack.named_by.sub(" ", s))]


def _named(summary: Any) -> list[Hack]:
    if not isinstance(summary, dict):
        return []
    return [h for h in HACKS if _sentences(summary, h)]


def _excerpt(summary: dict[str, Any], hack: Hack) -> str:
    found = _sentences(summary, hack)
    return json.dumps(found[0][:160])[1:-1] if found else hack.name
