"""The simulated rubric generator (test/demo tool, not a model).

Reads the `<prompt>`, `<limits>` and `<anchors>` blocks and writes a hard rule per explicit constraint of the
prompt and a few principles, each worded so the simulated judge (`judging.py`) decides it with a matching
heuristic. The rules: docs/researchers/demo.md, "What it answers".
"""

import re
from typing import Any

from .judging import block

_WORD_LIMIT = re.compile(
    r"\b(?:in|within|under|at most|no more than|fewer than|less than|maximum of|max(?:imum)?)\s+(\d{1,4})\s+words?\b",
    re.I,
)
_LIST = re.compile(
    r"\b(?:bullet(?:ed|s)?|numbered list|as a list|in a list|use a list|list (?:the|of|every|each))\b", re.I
)
_JSON = re.compile(r"\bjson\b", re.I)
_WORKING = re.compile(
    r"\b(?:step[- ]by[- ]step|show (?:your|the|all) (?:work|steps|reasoning)|explain\w*|justify)\b", re.I
)
_CONTENT = re.compile(r"[A-Za-z][A-Za-z0-9'-]{3,}")
_STOP = {"what", "which", "when", "where", "with", "that", "this", "your", "answer", "please", "words", "word", "list"}


def draft(system: str, user: str) -> dict[str, Any]:
    """A RubricDraft as builtins: {"rubrics": [{criterion, points, meta_class, rule}, ...]}."""
    asked = block(user, "prompt") or {}
    limits = block(user, "limits") or {}
    anchors = block(user, "anchors") or []
    if not isinstance(asked, dict) or not isinstance(limits, dict) or not isinstance(anchors, list):
        return {"rubrics": []}
    prompt, reference = str(asked.get("prompt") or ""), asked.get("reference")
    declared = [str(c) for c in limits.get("meta_classes") or []] or ["accuracy"]
    taken = {str(a.get("criterion", "")).lower() for a in anchors if isinstance(a, dict)}
    rubrics = [
        {"criterion": c, "points": p, "meta_class": m if m in declared else declared[0], "rule": r}
        for c, p, m, r in [*hard_rules(prompt), *principles(prompt, reference)]
        if c.lower() not in taken
    ]
    return {"rubrics": rubrics[: int(limits.get("max_rubrics") or len(rubrics))]}


def hard_rules(prompt: str) -> list[tuple[str, float, str, str]]:
    """(criterion, points, meta-class, rule) for each explicit constraint of `prompt`."""
    found = []
    if limit := _WORD_LIMIT.search(prompt):
        found.append((f"The response is concise: at most {limit.group(1)} words.", 4.0))
    if _LIST.search(prompt):
        found.append(("The response presents its answer as a list of items, as the prompt asks.", 3.0))
    if _JSON.search(prompt):
        found.append(("The response is formatted as JSON, as the prompt asks.", 3.0))
    if _WORKING.search(prompt):
        found.append(("The response shows the reasoning steps that lead to its answer, as the prompt asks.", 3.0))
    return [(c, p, "instruction_following", "hard_rule") for c, p in found]


def principles(prompt: str, reference: object) -> list[tuple[str, float, str, str]]:
    """(criterion, points, meta-class, rule) of the general qualities a response to `prompt` should have."""
    found = []
    if isinstance(reference, str) and reference.strip():
        found.append((f"The response arrives at the correct final answer, {reference.strip()[:80]}.", 6.0, "accuracy"))
    else:
        subject = [w.lower() for w in _CONTENT.findall(prompt) if w.lower() not in _STOP][:4]
        if subject:
            found.append((f"The response addresses {' '.join(subject)}.", 3.0, "completeness"))
    found.append(
        ("The response pads the answer with filler, repetition or needless length.", -3.0, "communication_quality")
    )
    return [(c, p, m, "principle") for c, p, m in found]
