"""Analysing one scored rollout: the prompt, the analyst's answer, the RolloutAnalysis.

Plain async Python: a test hands in an `analyst` function and needs no broker.
The stable part (the instructions) is the system message, so providers can
cache it; the rollout, its training context and its score follow as JSON data
with `<` escaped, so nothing in them can close a data block or pose as an
instruction.
"""

import enum
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

from common import prompts
from rubricd.messages import HackingEvidence, RolloutAnalysis, Rubric, RubricFinding, ScoredRollout, Severity

ANALYZER = "analyzer"  # the agent: its settings are `agents.analyzer`, its prompt prompts/analyzer.md


class FindingKind(enum.StrEnum):
    GAMED = "gamed"
    MISCALIBRATED = "miscalibrated"
    MISSING = "missing"


class EvidenceDraft(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    evidence: str  # quoted verbatim from the response
    severity: Severity


class FindingDraft(msgspec.Struct, frozen=True, kw_only=True):
    finding: FindingKind
    rubric_id: str  # "" for a missing rubric
    note: str


class AnalysisDraft(msgspec.Struct, frozen=True, kw_only=True):
    """What the analyzer agent returns (every field required: strict structured output)."""

    quality: str
    quality_score: float
    reward_hacking: list[EvidenceDraft]
    rubric_findings: list[FindingDraft]
    advancement: list[str]
    observations: list[str]


Analyst = Callable[[list[dict[str, str]]], Awaitable[AnalysisDraft]]


class AnalysisFailed(Exception):
    """The analyst gave no usable answer (after its own retries)."""


class _ContextView(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    total_steps: int | None
    goal: str
    model_size: str


class _RolloutView(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    prompt: str
    response: str
    reference: str | None = None


class _ResultView(msgspec.Struct, frozen=True, kw_only=True):
    rubric_id: str
    criterion: str
    points: float
    met: bool
    explanation: str


class _ScoreView(msgspec.Struct, frozen=True, kw_only=True):
    status: str
    reward: float | None
    rubric_version: int
    results: list[_ResultView]


def load_template(path: Path | None = None) -> str:
    return prompts.load(__package__, ANALYZER, path)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more characters]"


def user_message(scored: ScoredRollout, rubrics: list[Rubric], *, max_chars: int = 20_000) -> str:
    """The context, the rollout and its score (with each rubric's criterion), as data."""
    rollout, score = scored.rollout, scored.score
    context = _ContextView(
        step=rollout.step,
        total_steps=rollout.context.total_steps,
        goal=rollout.context.goal,
        model_size=rollout.context.model_size,
    )
    view = _RolloutView(
        prompt=_cut(rollout.prompt, max_chars), response=_cut(rollout.response, max_chars), reference=rollout.reference
    )
    criteria = {r.id: r.criterion for r in rubrics}
    results = [
        _ResultView(
            rubric_id=r.rubric_id,
            criterion=criteria.get(r.rubric_id, ""),
            points=r.points,
            met=r.met,
            explanation=r.explanation,
        )
        for r in score.results
    ]
    graded = _ScoreView(
        status=str(score.status), reward=score.reward, rubric_version=score.rubric_version, results=results
    )
    return "\n".join(
        [prompts.block("context", context), prompts.block("rollout", view), prompts.block("score", graded)]
    )


def messages(
    template: str, scored: ScoredRollout, rubrics: list[Rubric], *, max_chars: int = 20_000
) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": template.rstrip() + "\n"},
        {"role": "user", "content": user_message(scored, rubrics, max_chars=max_chars)},
    ]


def build_analysis(scored: ScoredRollout, draft: AnalysisDraft) -> RolloutAnalysis:
    """The RolloutAnalysis message from the analyst's draft; ids and numbers come from the score."""
    rollout, score = scored.rollout, scored.score
    return RolloutAnalysis(
        run_id=rollout.run_id,
        rollout_id=rollout.rollout_id,
        step=rollout.step,
        rubric_version=score.rubric_version,
        instance_key=score.instance_key,
        quality=draft.quality,
        quality_score=min(1.0, max(0.0, draft.quality_score)),
        reward=score.reward,
        reward_hacking=[
            HackingEvidence(type=e.type, evidence=e.evidence, severity=e.severity) for e in draft.reward_hacking
        ],
        rubric_findings=[
            RubricFinding(finding=str(f.finding), note=f.note, rubric_id=f.rubric_id or None)
            for f in draft.rubric_findings
        ],
        advancement=list(draft.advancement),
        observations=list(draft.observations),
    )


async def analyze_rollout(
    scored: ScoredRollout, rubrics: list[Rubric], template: str, analyst: Analyst, *, max_chars: int = 20_000
) -> RolloutAnalysis:
    """Ask the analyst about `scored`; raises AnalysisFailed when it cannot answer."""
    draft = await analyst(messages(template, scored, rubrics, max_chars=max_chars))
    return build_analysis(scored, draft)


def render(analysis: RolloutAnalysis) -> str:
    """A compact readable text of an analysis: what memory embeds and retrieval shows."""
    reward = "none" if analysis.reward is None else f"{analysis.reward:.2f}"
    lines = [
        f"Analysis of rollout {analysis.rollout_id} at step {analysis.step} (rubrics v{analysis.rubric_version}, reward {reward}).",
        f"Quality ({analysis.quality_score:.2f}): {analysis.quality}",
    ]
    lines += [f'Reward hacking, {e.type} ({e.severity}): "{_cut(e.evidence, 200)}"' for e in analysis.reward_hacking]
    lines += [
        f"Rubric {f.finding}{f' ({f.rubric_id})' if f.rubric_id else ''}: {f.note}" for f in analysis.rubric_findings
    ]
    lines += [f"To advance: {a}" for a in analysis.advancement]
    lines += [f"Observed: {o}" for o in analysis.observations]
    return "\n".join(lines)
