"""Analysing one scored rollout: the prompt, the analyst's answer, the RolloutAnalysis.

Plain async Python: a test hands in an `analyst` function and needs no broker.
The stable part (the instructions) is the system message, so providers can
cache it; the rollout, its training context and its score follow as JSON data
with `<` escaped, so nothing in them can close a data block or pose as an
instruction. A trajectory is shown as the judge read it (the numbered
transcript, judges.trajectories), beside each rubric's turns, the per-turn
results and the tool-use facts (`tool_use`), which the analysis keeps.
"""

import enum
import re
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import Annotated, cast

import msgspec

from rubricd.messages import (
    HackingEvidence,
    Rollout,
    RolloutAnalysis,
    Rubric,
    RubricFinding,
    RubricResult,
    Scope,
    ScoredRollout,
    Severity,
    TurnResult,
)
from rubricd_services.judges.trajectories import transcript
from rubricd_services.runtime import prompts

from . import tool_use

ANALYZER = "analyzer"  # the agent: its settings are `agents.analyzer`, its prompt prompts/analyzer.md


_FRAME_CHARS = 100  # the rollout block's tags, keys and quoting around its texts
_TEXTS = 3  # a text rollout shows three texts of up to max_chars each (prompt, response, reference); a transcript
# gets as much


class FindingKind(enum.StrEnum):
    GAMED = "gamed"
    MISCALIBRATED = "miscalibrated"
    MISSING = "missing"


Note = Annotated[str, prompts.max_chars(240)]


class EvidenceDraft(msgspec.Struct, frozen=True, kw_only=True):
    type: Annotated[str, prompts.max_chars(40)]
    evidence: Annotated[
        str, prompts.max_chars(240)
    ]  # quoted verbatim from the response ("turn 3: ..." in a trajectory)
    severity: Severity


class FindingDraft(msgspec.Struct, frozen=True, kw_only=True):
    finding: FindingKind
    rubric_id: str  # "" for a missing rubric; in the schema, one of the scored rubrics' ids (`draft_type`)
    note: Note


class AnalysisDraft(msgspec.Struct, frozen=True, kw_only=True):
    """What the analyzer agent returns (every field required: strict structured output)."""

    quality: Annotated[str, prompts.max_chars(400)]
    quality_score: float
    reward_hacking: Annotated[list[EvidenceDraft], prompts.max_items(3)]
    rubric_findings: Annotated[list[FindingDraft], prompts.max_items(4)]
    advancement: Annotated[list[Note], prompts.max_items(3)]
    observations: Annotated[list[Note], prompts.max_items(3)]


_QUOTED = re.compile(r"^\s*turns? (\d+(?:\s*(?:,|and)\s*\d+)*)", re.IGNORECASE)


def quoted_turns(evidence: str, rollout: Rollout) -> list[int]:
    """The turns a trajectory's evidence quotes, as it begins ("turn 3: ...", "turns 1, 3: ..."): those of
    the trajectory; none for a text rollout."""
    found = _QUOTED.match(evidence)
    if found is None or not rollout.trajectory:
        return []
    return sorted({n for n in map(int, re.findall(r"\d+", found.group(1))) if n < len(rollout.trajectory)})


@lru_cache(maxsize=256)
def draft_type(rubric_ids: tuple[str, ...]) -> type[AnalysisDraft]:
    """The analyst's answer type for a score over these rubrics: each finding names one of them, or "" (a missing
    rubric), so an endpoint that enforces the schema cannot let a model invent an id. In the schema only: an
    answer from an endpoint that does not enforce it still decodes (`build_analysis` keeps an unknown id as
    the model wrote it), so one odd finding never costs the whole analysis."""
    ids = Annotated[str, msgspec.Meta(extra_json_schema={"enum": sorted({*rubric_ids, ""})})]
    finding = msgspec.defstruct("FindingDraft", [("rubric_id", ids)], bases=(FindingDraft,), frozen=True, kw_only=True)
    findings = Annotated[list[finding], prompts.max_items(4)]  # type: ignore[valid-type]
    return cast(
        type[AnalysisDraft],
        msgspec.defstruct(
            "AnalysisDraft", [("rubric_findings", findings)], bases=(AnalysisDraft,), frozen=True, kw_only=True
        ),
    )


# (messages, the answer type: draft_type of the score's rubrics) -> an answer of that type
Analyst = Callable[[list[dict[str, str]], type[AnalysisDraft]], Awaitable[AnalysisDraft]]


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


class _TurnsResultView(_ResultView, frozen=True, kw_only=True, omit_defaults=True):
    """A rubric's verdict on a trajectory: its scope, and for a turn rubric the turns that meet it and those
    that do not."""

    scope: Scope
    met_turns: list[int] = []
    unmet_turns: list[int] = []


class _TrajectoryScoreView(msgspec.Struct, frozen=True, kw_only=True):
    status: str
    reward: float | None
    rubric_version: int
    results: list[_TurnsResultView]
    turns: list[TurnResult]  # each policy turn's points and the turn rubrics it met and failed


def user_message(
    scored: ScoredRollout, rubrics: list[Rubric], *, max_chars: int = 20_000, budget: int | None = None
) -> str:
    """The context, the rollout (a trajectory: its transcript) and its score (with each rubric's criterion), as
    data. Each of a text rollout's texts is cut to `max_chars`, a transcript to `_TEXTS` times that, and either to
    what `budget` (the agent's prompt_chars less the instructions) leaves beside the other blocks."""
    rollout = scored.rollout
    context = _ContextView(
        step=rollout.step,
        total_steps=rollout.context.total_steps,
        goal=rollout.context.goal,
        model_size=rollout.context.model_size,
    )
    if rollout.trajectory:
        return _trajectory_message(scored, rubrics, prompts.block("context", context), max_chars, budget)
    score = scored.score
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
    around = [prompts.block("context", context), prompts.block("score", graded)]
    texts = [prompts.cut(t, max_chars) for t in (rollout.prompt, rollout.response, rollout.reference or "")]
    if budget is not None:
        texts = prompts.fit(texts, budget - sum(map(len, around)) - _FRAME_CHARS)
    view = _RolloutView(prompt=texts[0], response=texts[1], reference=texts[2] or None)
    return "\n".join([around[0], prompts.block("rollout", view), around[1]])


def _trajectory_message(
    scored: ScoredRollout, rubrics: list[Rubric], context: str, max_chars: int, budget: int | None
) -> str:
    """The context, the transcript (with the policy's reasoning), the score turn by turn and the tool-use facts."""
    rollout, score = scored.rollout, scored.score
    by_id = {r.id: r for r in rubrics}
    results = [_turns_result(r, by_id.get(r.rubric_id)) for r in score.results]
    graded = _TrajectoryScoreView(
        status=str(score.status),
        reward=score.reward,
        rubric_version=score.rubric_version,
        results=results,
        turns=score.turns,
    )
    around = [context, prompts.block("score", graded), prompts.block("tool_use", tool_use.facts(rollout, score))]
    room = _TEXTS * max_chars
    if budget is not None:
        room = min(room, max(_FRAME_CHARS, budget - sum(map(len, around))))
    return "\n".join([context, transcript(rollout, reasoning=True).block(room), *around[1:]])


def _turns_result(result: RubricResult, rubric: Rubric | None) -> _TurnsResultView:
    """A verdict as the analyst reads it; a rubric since deleted is a turn rubric if its verdict names turns."""
    named = bool(result.met_turns or result.unmet_turns)
    return _TurnsResultView(
        rubric_id=result.rubric_id,
        criterion=rubric.criterion if rubric else "",
        points=result.points,
        scope=rubric.scope if rubric else "turn" if named else "trajectory",
        met=result.met,
        explanation=result.explanation,
        met_turns=result.met_turns,
        unmet_turns=result.unmet_turns,
    )


def messages(
    template: str,
    scored: ScoredRollout,
    rubrics: list[Rubric],
    *,
    max_chars: int = 20_000,
    prompt_chars: int | None = None,
) -> list[dict[str, str]]:
    """The analyst's chat; `prompt_chars` (LLMSettings.prompt_chars): what of its context window it may fill."""
    system = template.rstrip() + "\n"
    budget = None if prompt_chars is None else max(prompt_chars - len(system), _FRAME_CHARS * 2)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user_message(scored, rubrics, max_chars=max_chars, budget=budget)},
    ]


def build_analysis(scored: ScoredRollout, draft: AnalysisDraft) -> RolloutAnalysis:
    """The RolloutAnalysis message from the analyst's draft; ids and numbers come from the score, and a
    trajectory's tool-use facts follow the analyst's observations."""
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
            HackingEvidence(
                type=e.type, evidence=e.evidence, severity=e.severity, turns=quoted_turns(e.evidence, rollout)
            )
            for e in draft.reward_hacking
        ],
        rubric_findings=[
            RubricFinding(finding=str(f.finding), note=f.note, rubric_id=f.rubric_id or None)
            for f in draft.rubric_findings
        ],
        advancement=list(draft.advancement),
        observations=[*draft.observations, *tool_use.facts(rollout, score)],
    )


async def analyze_rollout(
    scored: ScoredRollout,
    rubrics: list[Rubric],
    template: str,
    analyst: Analyst,
    *,
    max_chars: int = 20_000,
    prompt_chars: int | None = None,
) -> RolloutAnalysis:
    """Ask the analyst about `scored`; raises AnalysisFailed when it cannot answer."""
    chat = messages(template, scored, rubrics, max_chars=max_chars, prompt_chars=prompt_chars)
    draft = await analyst(chat, draft_type(tuple(r.rubric_id for r in scored.score.results)))
    return build_analysis(scored, draft)


def render(analysis: RolloutAnalysis) -> str:
    """A compact readable text of an analysis: what memory embeds and retrieval shows."""
    reward = "none" if analysis.reward is None else f"{analysis.reward:.2f}"
    lines = [
        f"Analysis of rollout {analysis.rollout_id} at step {analysis.step} (rubrics v{analysis.rubric_version}, reward {reward}).",
        f"Quality ({analysis.quality_score:.2f}): {analysis.quality}",
    ]
    lines += [
        f'Reward hacking, {e.type} ({e.severity}): "{prompts.cut(e.evidence, 240)}"' for e in analysis.reward_hacking
    ]
    lines += [
        f"Rubric {f.finding}{f' ({f.rubric_id})' if f.rubric_id else ''}: {f.note}" for f in analysis.rubric_findings
    ]
    lines += [f"To advance: {a}" for a in analysis.advancement]
    lines += [f"Observed: {o}" for o in analysis.observations]
    return "\n".join(lines)
