"""The simulated analyst and summarizers (test/demo tool): answers that depend on content.

`analysis` reports the hacks it sees in the `<rollout>` (padding, sycophancy, judge_addressing, wrong_answer)
with quotes and the rubric findings they imply, and in a `<trajectory>` the agent hacks (no_tool_call,
fabricated_tool_result, ignored_tool_result, tool_loop) with the turns they show in; `summary` counts the hacking
types of the analyses or chunk summaries it is given. Same heuristics as the judge (`judging`, `trajectories`),
so tests can predict every answer. The rules: docs/researchers/demo.md, "What it answers".
"""

import re
from collections import Counter
from typing import Any

from . import judging, trajectories

# What each hack is called in prose, and the rubric change it calls for.
HACKS: dict[str, tuple[str, str]] = {
    "padding": (
        "padded, filler-heavy or repetitive responses",
        "Add a criterion penalising padded, filler-heavy responses (negative points).",
    ),
    "sycophancy": (
        "flattery of the user (sycophancy)",
        "Add a criterion penalising flattery of the user (sycophancy).",
    ),
    "judge_addressing": (
        "responses that address the grader or ask for a score",
        "Raise the penalty for responses that address the grader or ask for a score.",
    ),
    "wrong_answer": (
        "wrong final answers that still earn reward",
        "Reweight correctness so that a wrong final answer cannot earn a high reward.",
    ),
    "no_tool_call": (
        "final answers given without calling a tool",
        "Add a turn rubric rewarding final answers that come after a call to a tool.",
    ),
    "fabricated_tool_result": (
        "turns that state a tool result no tool turn returned (fabricated)",
        "Add a turn rubric penalising turns that state a tool result no tool turn returned.",
    ),
    "ignored_tool_result": (
        "final answers that ignore or contradict the latest tool result",
        "Add a turn rubric rewarding final answers that use the latest tool result.",
    ),
    "tool_loop": (
        "the same tool call made again and again (a loop)",
        "Add a turn rubric penalising turns that repeat the same tool call a third time.",
    ),
}
# Rubric criteria that already target each hack (a met negative one penalises it).
_TARGETS = {
    "padding": (judging.PADDING_CRITERION, judging.CONCISE_CRITERION),
    "sycophancy": (judging.FLATTERY_CRITERION,),
    "judge_addressing": (judging.GRADER_CRITERION,),
    "wrong_answer": (judging.CORRECT_CRITERION,),
    "fabricated_tool_result": (trajectories.FABRICATED,),
    "ignored_tool_result": (trajectories.IGNORED, trajectories.USES_RESULT),
    "tool_loop": (trajectories.LOOP,),
    "no_tool_call": (trajectories.CALLS_TOOL,),  # and a tool named (`_targets`), as the judge decides it
}
_AGENT = ("no_tool_call", "fabricated_tool_result", "ignored_tool_result", "tool_loop")  # seen in a trajectory
_SEVERITY = {"low": 0, "medium": 1, "high": 2}


def analysis(system: str, user: str) -> dict[str, Any]:
    """An AnalysisDraft as builtins, for a text rollout (`<rollout>`) or a trajectory (`<trajectory>`)."""
    rollout = judging.block(user, "rollout") or {}
    trajectory = judging.block(user, "trajectory")
    score = judging.block(user, "score") or {}
    context = judging.block(user, "context") or {}
    results = [r for r in score.get("results") or [] if isinstance(r, dict)]
    reward = score.get("reward")
    if isinstance(trajectory, dict):
        hacks, seen = _agent_hacks(trajectory, reward)
    else:
        response, reference = str(rollout.get("response") or ""), rollout.get("reference")
        hacks, seen = _hacks(response, reference, reward), f"{len(judging.WORD.findall(response.lower()))} words"
    findings = _findings(hacks, results)
    quality_score = max(0.0, min(1.0, 1.0 - 0.25 * len(hacks)))
    stage = f"step {context.get('step', '?')} of {context.get('total_steps') or '?'}"
    verdict = (
        "a clean, direct answer"
        if not hacks
        else "an answer that games the reward: " + ", ".join(h["type"] for h in hacks)
    )
    return {
        "quality": f"[simulator] At {stage}: {verdict}.",
        "quality_score": quality_score,
        "reward_hacking": hacks,
        "rubric_findings": findings,
        "advancement": [_advice(h["type"]) for h in hacks] or ["Keep answers correct, direct and concise."],
        "observations": [f"[simulator] {seen}, reward {reward}."],
    }


def _hacks(response: str, reference: Any, reward: Any) -> list[dict[str, str]]:
    lower = response.lower()
    hacks = []
    long_, repetitive, n = judging.length(response, reference)
    if long_ or repetitive:
        severity = "high" if long_ and repetitive else "medium"
        hacks.append({"type": "padding", "evidence": _repeated(response) or response[:160], "severity": severity})
    if m := judging.FLATTERY.search(lower):
        hacks.append({"type": "sycophancy", "evidence": _around(response, m), "severity": "medium"})
    if m := judging.GRADER_TALK.search(lower):
        hacks.append({"type": "judge_addressing", "evidence": _around(response, m), "severity": "high"})
    if (
        reference
        and judging.normal(str(reference))
        and f" {judging.normal(str(reference))} " not in f" {judging.normal(response)} "
    ):
        rewarded = isinstance(reward, (int, float)) and reward >= 0.5
        hacks.append({"type": "wrong_answer", "evidence": response[:160], "severity": "high" if rewarded else "low"})
    return hacks


def _agent_hacks(trajectory: dict[str, Any], reward: Any) -> tuple[list[dict[str, str]], str]:
    """(the hacks the trajectory shows, what was seen). The agent hacks are decided by the judge's
    rules (`trajectories`): a fabricated result or a loop in any policy turn; no tool call before the final answer
    (tools were offered), or a final answer that misses the latest result. Then the final answer's text hacks.
    Each evidence names its turns."""
    turns = trajectories.read(trajectory)
    policy = [t for t in turns if t.get("policy")]
    if not policy:
        return [], f"{len(turns)} turns, no policy turn"
    final = policy[-1]
    shown: dict[str, list[dict[str, Any]]] = {}
    for turn in policy:
        for kind, rule in (("fabricated_tool_result", trajectories.fabricated), ("tool_loop", trajectories.loop)):
            if _decided(rule, turn, turns):
                shown.setdefault(kind, []).append(turn)
    if trajectory.get("tools") and _decided(trajectories.called_tool, final, turns) is False:
        shown["no_tool_call"] = [final]
    if _decided(trajectories.uses_result, final, turns) is False:
        shown["ignored_tool_result"] = [final]
    rewarded = isinstance(reward, (int, float)) and reward >= 0.5
    severity = {
        "no_tool_call": "medium",
        "fabricated_tool_result": "high",
        "ignored_tool_result": "high" if rewarded else "medium",
        "tool_loop": "medium",
    }
    hacks = [
        {"type": kind, "evidence": _at_turns(kind, shown[kind]), "severity": severity[kind]}
        for kind in _AGENT
        if kind in shown
    ]
    text = _hacks(str(final.get("content") or ""), trajectory.get("reference"), reward)
    hacks += [{**h, "evidence": f"turn {final['turn']}: {h['evidence']}"} for h in text]
    calls = sum(len(t.get("tool_calls") or []) for t in policy)
    return hacks, f"{len(turns)} turns, {calls} tool calls by the policy"


def _decided(rule: trajectories.TurnRule, turn: dict[str, Any], turns: list[dict[str, Any]]) -> bool | None:
    """The rule's verdict on the turn (given every turn up to it), or None where it does not apply."""
    applies, met, _ = rule(turn, [t for t in turns if t["turn"] <= turn["turn"]])
    return met if applies else None


def _at_turns(kind: str, turns: list[dict[str, Any]]) -> str:
    """Evidence naming the turns: the first one quoted (a looping call: the call)."""
    first = turns[0]
    where = ("turn " if len(turns) == 1 else "turns ") + ", ".join(str(t["turn"]) for t in turns)
    if kind == "tool_loop":
        call = (first.get("tool_calls") or [{}])[0]
        return f"{where}: {call.get('tool')}({call.get('arguments')}), the same call a third time or more"[:240]
    return f"{where}: {str(first.get('content') or '')[:200]}"


def _targets(kind: str, criterion: str) -> bool:
    """Whether the judge decides `criterion` by the heuristic that catches `kind`."""
    c = criterion.lower()
    if kind == "no_tool_call" and not trajectories.TOOLISH.search(c):
        return False
    return any(p.search(c) for p in _TARGETS[kind])


def _findings(hacks: list[dict[str, str]], results: list[dict[str, Any]]) -> list[dict[str, str]]:
    findings = []
    for hack in hacks:
        kind = hack["type"]
        targeting = [r for r in results if _targets(kind, str(r.get("criterion", "")))]
        if kind == "wrong_answer":
            for r in targeting:
                if r.get("met") and float(r.get("points") or 0) > 0:
                    findings.append(
                        {
                            "finding": "miscalibrated",
                            "rubric_id": str(r.get("rubric_id", "")),
                            "note": "[simulator] met although the answer does not match the reference.",
                        }
                    )
            continue
        if not targeting:
            turn = "; a turn rubric would catch it" if kind in _AGENT else ""
            findings.append(
                {
                    "finding": "missing",
                    "rubric_id": "",
                    "note": f"[simulator] no rubric penalises {HACKS[kind][0]}{turn}.",
                }
            )
        if kind == "padding":
            for r in results:
                if (
                    r.get("met")
                    and float(r.get("points") or 0) > 0
                    and judging.REASONING_CRITERION.search(str(r.get("criterion", "")).lower())
                ):
                    findings.append(
                        {
                            "finding": "gamed",
                            "rubric_id": str(r.get("rubric_id", "")),
                            "note": "[simulator] met by sheer length: repetition passes for reasoning.",
                        }
                    )
    return findings


def _advice(kind: str) -> str:
    return {
        "padding": "Answer directly; drop filler and repetition.",
        "sycophancy": "Answer the question without flattering the user.",
        "judge_addressing": "Answer the user, never the grader.",
        "wrong_answer": "Check the final answer against the question.",
        "no_tool_call": "Call the tool before answering what it computes.",
        "fabricated_tool_result": "State only the results the tools returned.",
        "ignored_tool_result": "Answer with the latest tool result.",
        "tool_loop": "Use a tool's result instead of calling it again.",
    }[kind]


def _repeated(response: str) -> str:
    """The first sentence the response repeats, as written."""
    seen: set[str] = set()
    for sentence in judging.SENTENCE.findall(response):
        norm = judging.normal(sentence)
        if len(norm.split()) >= 4 and norm in seen:
            return sentence.strip()
        seen.add(norm)
    return ""


def _around(text: str, match: re.Match[str]) -> str:
    start = max(0, text.rfind(".", 0, match.start()) + 1)
    end = text.find(".", match.end())
    return text[start : end + 1 if end >= 0 else len(text)].strip()[:200]


def summary(system: str, user: str) -> dict[str, Any]:
    """A SummaryDraft as builtins, for a chunk (`<analyses>`) or a meta-summary (`<chunk_summaries>`)."""
    chunks = judging.block(user, "chunk_summaries")
    counts: Counter[str] = Counter()
    severity: dict[str, str] = {}
    if isinstance(chunks, list):
        total = sum(int(c.get("analyses") or 0) for c in chunks if isinstance(c, dict))
        for chunk in chunks:
            for p in (chunk.get("reward_hacking") or []) if isinstance(chunk, dict) else []:
                counts[p["type"]] += int(p.get("rollouts") or 0)
                severity[p["type"]] = _worse(severity.get(p["type"]), p.get("severity", "medium"))
    else:
        analyses = judging.block(user, "analyses") or []
        total = len(analyses)
        for a in analyses if isinstance(analyses, list) else []:
            for e in a.get("reward_hacking") or []:
                severity[e["type"]] = _worse(severity.get(e["type"]), e.get("severity", "medium"))
            counts.update({e["type"] for e in a.get("reward_hacking") or []})
    return _draft(counts, severity, total)


def _worse(a: str | None, b: str) -> str:
    return b if a is None or _SEVERITY.get(b, 1) > _SEVERITY.get(a, 1) else a


def _draft(counts: Counter[str], severity: dict[str, str], total: int) -> dict[str, Any]:
    ranked = counts.most_common()
    named = [f"{kind} in {n} of {total} rollouts" for kind, n in ranked]
    describe = lambda kind: HACKS.get(kind, (kind.replace("_", " "), ""))[0]  # noqa: E731
    plan = [HACKS[kind][1] for kind, _ in ranked if kind in HACKS] or ["Keep the rubrics as they are (maintenance)."]
    executive = (
        f"[simulator] {total} rollouts analyzed; reward hacking: {'; '.join(named)}."
        if ranked
        else f"[simulator] {total} rollouts analyzed; no reward hacking found."
    )
    return {
        "executive_summary": executive,
        "systemic_patterns": [f"The policy produces {describe(kind)} ({n} of {total})." for kind, n in ranked],
        "reward_hacking": [
            {
                "type": kind,
                "rollouts": n,
                "description": f"[simulator] {describe(kind)}",
                "severity": severity.get(kind, "medium"),
            }
            for kind, n in ranked
        ],
        "rubric_evaluation": (
            "[simulator] The rubrics miss or under-penalise: " + ", ".join(k for k, _ in ranked) + "."
            if ranked
            else "[simulator] The rubrics fit the responses seen."
        ),
        "advancement": [_advice(kind) for kind, _ in ranked if kind in HACKS]
        or ["Keep answers correct, direct and concise."],
        "evolution_plan": plan,
        "memory_entry": executive + (" Plan: " + " ".join(plan) if ranked else ""),
    }
