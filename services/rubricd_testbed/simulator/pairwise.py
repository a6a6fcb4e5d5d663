"""The simulated pairwise judge (test/demo tool): the judge's heuristics, applied to both responses.

Each response of the `<comparison>` block is decided on each rubric by `judging.decide`, so the one holding
the reference wins; a prompt holding `[sim:prefer-first]` makes it position-biased, to exercise the
consistency check. The rules: docs/researchers/demo.md, "What it answers".
"""

import hashlib
import json
import re
from typing import Any

from .judging import block, decide

PREFER_FIRST = "[sim:prefer-first]"
_ACCURACY = re.compile(r"@(0(?:\.\d+)?|1(?:\.0+)?)$")  # a model named `<name>@q`: a judge right with probability q


def verdict(system: str, user: str) -> dict[str, Any]:
    """A PairwiseVerdict as builtins: per rubric whether the first and second responses meet it, the gatekeeper
    (the heaviest rubric that separates them), the preference from the net points, and a justification."""
    rubrics = block(system, "rubrics") or block(user, "rubrics") or []
    pair = block(user, "comparison") or {}
    if not isinstance(rubrics, list) or not isinstance(pair, dict):
        return {}
    biased = PREFER_FIRST in str(pair.get("prompt") or "")
    reference = pair.get("reference")
    responses = [str(pair.get("first") or ""), str(pair.get("second") or "")]
    verdicts: dict[str, dict[str, Any]] = {}
    net = [0.0, 0.0]
    separating: list[tuple[float, str]] = []
    for rubric in rubrics:
        if not (isinstance(rubric, dict) and "id" in rubric):
            continue
        points = float(rubric.get("points") or 0)
        if biased:
            met = [points >= 0, points < 0]
            why = "position bias (simulated): the response shown first is preferred."
        else:
            decided = [decide(str(rubric.get("criterion", "")), points, r, reference) for r in responses]
            met = [decided[0][0], decided[1][0]]
            why = f"first: {decided[0][1]} second: {decided[1][1]}"
        for i in (0, 1):
            net[i] += points if met[i] else 0.0
        if met[0] != met[1]:
            separating.append((abs(points), str(rubric["id"])))
        verdicts[str(rubric["id"])] = {"explanation": f"[simulator] {why}", "first": met[0], "second": met[1]}
    preferred = "first" if net[0] > net[1] else "second" if net[1] > net[0] else "tie"
    gatekeeper = max(separating, key=lambda s: s[0])[1] if separating and preferred != "tie" else None
    return {
        "verdicts": verdicts,
        "gatekeeper": gatekeeper,
        "preferred": preferred,
        "justification": f"[simulator] net points {net[0]:g} (first) vs {net[1]:g} (second); "
        f"gatekeeper {gatekeeper or 'none'}.",
    }


def accuracy(model: str) -> float | None:
    """The accuracy a pairwise judge model named `<name>@q` plays (q in [0, 1]: the demo's frozen Rubric-ARM
    judge, whose version is its accuracy so far); None for any other name."""
    found = _ACCURACY.search(model)
    return float(found.group(1)) if found else None


def erring(content: str, right: float, seed: str) -> str:
    """The verdict, or with probability 1 - `right` (decided by a hash of `seed`: the same call errs the same way)
    its two responses swapped, every rubric and the preference: a judge that picks the other one."""
    draw = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "big") / 2**64
    if draw < right:
        return content
    answer = json.loads(content)
    for verdict in answer.get("verdicts", {}).values():
        verdict["first"], verdict["second"] = verdict["second"], verdict["first"]
        verdict["explanation"] += " [erring]"
    answer["preferred"] = {"first": "second", "second": "first"}.get(answer.get("preferred"), "tie")
    return json.dumps(answer)
