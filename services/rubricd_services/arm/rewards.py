"""Rubric-ARM's two training rewards. Plain Python: a test hands in completions, rubrics and preferences.

- The generator's: its completion read as a rubric set (`generated`: the generation rules of rubrics.draft,
  anchors first), then the frozen judge's preferences with that set over the prompt's labelled comparisons
  (`outcome` each, `generator_reward` over them): the share picked right, a tie earning the tie reward, a
  preference that flips with the order earning nothing.
- The judge's: its completion read as the pairwise judge's answer for the rubrics it was shown (`verdict`), the
  winner those verdicts give (judges.pairwise's rule) against the label: 1 right, 0 wrong.
A completion that cannot be used earns the stated penalty, with the reason. The rules:
docs/researchers/rubric-arm.md, "Training the generator and the judge".
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from rubricd.messages import Comparison, JudgeStatus, Order, OrderJudgment, PairOutcome, Preference, Rubric, RubricSet
from rubricd_services.judges import pairwise
from rubricd_services.llm.dialects import decode
from rubricd_services.llm.errors import Retryable
from rubricd_services.rubrics.draft import InvalidDraft, RubricDraft, build
from rubricd_services.rubrics.validation import RubricLimits


@dataclass(frozen=True)
class GeneratedSet:
    """A generator's completion as a rubric set: its rubrics (anchors first) and those dropped, or why none."""

    rubrics: list[Rubric] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    problem: str | None = None  # set: the completion earns the penalty


def generated(
    completion: str,
    anchors: Sequence[Rubric],
    meta_classes: Sequence[str],
    max_rubrics: int,
    max_points: float = RubricLimits.max_points,
) -> GeneratedSet:
    """Read the generator's answer (`{"rubrics": [{criterion, points, meta_class, rule}, ...]}`, JSON dug out of
    prose and fences as for an endpoint that cannot enforce a schema) and keep what the generation rules keep."""
    try:
        draft = decode(completion, RubricDraft, tolerant=True)
    except Retryable as e:
        return GeneratedSet(problem=f"not a rubric set: {e.reason}")
    try:
        drafted = build(draft, anchors, meta_classes, max_rubrics, max_points)
    except InvalidDraft as e:
        return GeneratedSet(problem=str(e))
    return GeneratedSet(drafted.rubrics, drafted.dropped)


def outcome(preference: Preference, tie_reward: float) -> PairOutcome:
    """What one labelled comparison, judged in both orders with the generated set, adds to the generator's reward."""
    label = preference.label
    assert label is not None
    if preference.status is not JudgeStatus.OK:
        return PairOutcome(comparison_id=preference.comparison_id, label=label, error=preference.error)
    if preference.consistent is False:
        return PairOutcome(comparison_id=preference.comparison_id, label=label, consistent=False, credit=0.0)
    winner = preference.winner
    return PairOutcome(
        comparison_id=preference.comparison_id,
        label=label,
        winner=winner,
        consistent=preference.consistent,
        credit=tie_reward if winner == "tie" else float(winner == label),
    )


def generator_reward(outcomes: Sequence[PairOutcome]) -> float | None:
    """The mean credit over the comparisons the judge answered; None if it answered none."""
    credited = [o.credit for o in outcomes if o.credit is not None]
    return round(sum(credited) / len(credited), 6) if credited else None


def shown_set(run_id: str, prompt_id: str, rubrics: list[Rubric]) -> RubricSet:
    """The generated set as the judge is shown it (version 0: it is never stored as the prompt's set)."""
    return RubricSet(run_id=run_id, instance_key=prompt_id, version=0, rubrics=rubrics)


@dataclass(frozen=True)
class Verdict:
    """A judge's completion read in one order: its judgment (A/B terms), or why it cannot be used."""

    judgment: OrderJudgment | None = None
    problem: str | None = None


def verdict(completion: str, rubric_set: RubricSet, order: Order, *, ties: bool) -> Verdict:
    """Read the judge's answer (the pairwise judge's format for these rubrics: `{"verdicts": {<id>: {explanation,
    first, second}, ...}, "gatekeeper", "preferred", "justification"}`) and decide its winner."""
    ids = tuple(r.id for r in rubric_set.rubrics)
    try:
        value = decode(completion, pairwise.answer_type(ids), tolerant=True)
    except Retryable as e:
        return Verdict(problem=f"not a verdict in the judge's format: {e.reason}")
    answer = pairwise.read_answer(value, ids)
    return Verdict(pairwise.judgment(order, rubric_set.rubrics, answer, ties=ties))


def judge_reward(judgment: OrderJudgment, comparison: Comparison) -> float:
    """1 when the verdict's winner is the labelled one, else 0."""
    return float(judgment.winner == comparison.label)
