"""Pairwise judging (Rubric-ARM): a comparison of two responses in, a Preference out.

A trainer (or a data pipeline labelling preferences) publishes a Comparison on
the comparisons stream; the comparer judges the two responses under the prompt's
rubric set, in both orders, and replies with a Preference. With a `label`
(the known better response) the Preference says whether the judge was
`correct`, and the run's judge accuracy counts it (rubricd_services.state.accuracy).
"""

from typing import Literal

import msgspec

from ._base import InstanceKey, Message, RolloutId, RunId, Step, Version
from .rollouts import TrainingContext
from .scores import JudgeStatus

# Which response is preferred: A, B, or neither ("tie").
Winner = Literal["A", "B", "tie"]
# The order the two responses were shown in: "AB" (A first) or "BA".
Order = Literal["AB", "BA"]
ComparisonId = RolloutId  # the same alphabet: it ends up in Redis keys


class Comparison(Message, tag="comparison", frozen=True, kw_only=True):
    """Two responses to one prompt, to be judged against each other.

    `comparison_id` is chosen by the publisher and unique within the run; a
    comparison published twice is judged once (the first Preference is replied
    again). `instance_key` finds the rubric set as a rollout's does (per-instance
    mode: its own, or a hash of the prompt). `label`, when known, is the
    preferred response: the Preference then says whether the judge agreed.
    `reply_to` must be one of the namespace's reply streams.
    """

    run_id: RunId
    comparison_id: ComparisonId
    step: Step = 0
    prompt: str
    response_a: str
    response_b: str
    reference: str | None = None
    label: Winner | None = None
    instance_key: InstanceKey | None = None
    reply_to: str | None = None
    context: TrainingContext = TrainingContext()
    metadata: dict[str, str] = {}
    published_at: float | None = None


class PairResult(msgspec.Struct, frozen=True, kw_only=True):
    """One rubric's verdict on both responses, in one order."""

    rubric_id: str
    points: float
    a_met: bool
    b_met: bool
    explanation: str = ""


class OrderJudgment(msgspec.Struct, frozen=True, kw_only=True):
    """What one judge call (one presentation order) decided, in A/B terms whatever the order.

    `winner` and `gatekeeper` follow the rule of the pairwise judge (judges.pairwise) from the
    per-rubric verdicts; `points_a`/`points_b` are each response's net points
    (the points of the rubrics it meets, negative ones subtracting).
    `judge_preferred` and `judge_gatekeeper` are the judge's own stated
    preference and decisive rubric (they decide only an exact tie of points
    when ties are not allowed). `attempts`: the LLM client's tries for a
    schema-valid answer (1: parsed at the first try).
    """

    order: Order
    winner: Winner
    gatekeeper: str | None = None
    points_a: float
    points_b: float
    results: list[PairResult] = []
    judge_preferred: Winner | None = None
    judge_gatekeeper: str | None = None
    justification: str = ""
    attempts: int = 1


class Preference(Message, tag="preference", frozen=True, kw_only=True):
    """The judge's answer to one Comparison.

    `winner` is None unless `status` is ok and the orders agree: a preference
    that flips with the order is reported `consistent: false`, never as a win.
    `consistent` is None when the comparison was judged in one order only
    (RUBRICD_PAIRWISE_BOTH_ORDERS=false) or not judged. `results` are the
    per-rubric verdicts of the first order (A shown first), `orders` every
    order's judgment. `gatekeeper` is the rubric that decided (the first
    order's, when the orders agree), with its `meta_class`. `correct` is
    whether `winner` equals `label` (None without a label or when not judged;
    an inconsistent preference of a labelled comparison is not correct).
    `format_ok`: every order asked gave a schema-valid answer.
    `rubrics_generation` and `rubrics_generation_error` are a Score's: whether
    the set judged with is the one the rubric generator wrote for the instance
    (`generated`) or the seed after a failed generation (`fallback`).
    """

    run_id: RunId
    comparison_id: ComparisonId
    step: Step = 0
    status: JudgeStatus
    winner: Winner | None = None
    consistent: bool | None = None
    rubric_version: Version = 0
    instance_key: InstanceKey | None = None
    results: list[PairResult] = []
    orders: list[OrderJudgment] = []
    gatekeeper: str | None = None
    meta_class: str | None = None
    justification: str = ""
    label: Winner | None = None
    correct: bool | None = None
    format_ok: bool = False
    error: str | None = None
    judge_ms: float | None = None
    judged_at: float | None = None
    rubrics_generation: Literal["generated", "fallback"] | None = None
    rubrics_generation_error: str | None = None


class JudgedComparison(Message, tag="judged_comparison", frozen=True, kw_only=True):
    """A comparison with its first Preference, kept per run for `rubricd export` (Keys.kept_comparisons)."""

    comparison: Comparison
    preference: Preference
