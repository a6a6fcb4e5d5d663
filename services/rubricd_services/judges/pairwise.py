"""Pairwise judging (Rubric-ARM): two responses, one rubric set, a winner; and the judge's accuracy.

Plain Python: a test hands in rubrics and judge answers and needs no broker. `decide` picks one order's winner
from the per-rubric verdicts and points (hard rules, then net points, then ties), never from the judge's stated
preference alone; `aggregate` combines both orders, so a position-biased judge shows as inconsistent.
The rules: docs/researchers/rubric-arm.md, "How the winner is chosen"; accuracy is counted in `rubricd_services.state.accuracy`.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal

import msgspec

from rubricd.messages import (
    Comparison,
    JudgeStatus,
    Order,
    OrderJudgment,
    PairResult,
    Preference,
    Rubric,
    RubricSet,
    Winner,
)
from rubricd_services.runtime import prompts

from .caller import Caller, JudgeFailed

PAIRWISE = "pairwise"  # the agent: its settings are `agents.pairwise`, its prompt prompts/pairwise.md
MAX_EXPLANATION_CHARS = 300
MAX_JUSTIFICATION_CHARS = 600
_FRAME_CHARS = 120  # the data block's tags, keys and quoting around the comparison's texts


# The judge's answer: first the per-rubric verdicts, then its decisive criterion, preference and why.
class PairVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """One rubric's verdict on both responses, reasons first."""

    explanation: Annotated[str, prompts.max_chars(MAX_EXPLANATION_CHARS)]
    first: bool
    second: bool


Preferred = Literal["first", "second", "tie"]


@lru_cache(maxsize=1024)
def answer_type(rubric_ids: tuple[str, ...]) -> type[msgspec.Struct]:
    """The judge's answer for these rubrics: `{"verdicts": {<id>: PairVerdict, ...}, "gatekeeper", "preferred",
    "justification"}`, every id required and no other; the gatekeeper's ids are in the schema only (an unknown
    one from an endpoint that does not enforce it counts as none)."""
    fields = [(f"r{i}", PairVerdict) for i in range(len(rubric_ids))]
    rename = {f"r{i}": rubric_id for i, rubric_id in enumerate(rubric_ids)}
    verdicts = msgspec.defstruct(
        "PairVerdicts", fields, rename=rename, forbid_unknown_fields=True, frozen=True, kw_only=True
    )
    gatekeeper = Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(rubric_ids)})] | None
    justification = Annotated[str, prompts.max_chars(MAX_JUSTIFICATION_CHARS)]
    return msgspec.defstruct(
        "PairwiseVerdict",
        [
            ("verdicts", verdicts),
            ("gatekeeper", gatekeeper),
            ("preferred", Preferred),
            ("justification", justification),
        ],
        forbid_unknown_fields=True,
        frozen=True,
        kw_only=True,
    )


@dataclass(frozen=True)
class Answer:
    """One judge answer in the judge's own terms (first/second), with the LLM client's tries."""

    verdicts: dict[str, tuple[bool, bool, str]]  # rubric id -> (first met, second met, explanation)
    gatekeeper: str | None
    preferred: Preferred
    justification: str
    attempts: int = 1


def read_answer(value: msgspec.Struct, rubric_ids: Sequence[str], attempts: int = 1) -> Answer:
    """An `answer_type(rubric_ids)` instance as an Answer."""
    given = value.verdicts  # type: ignore[attr-defined]
    verdicts = {}
    for i, rubric_id in enumerate(rubric_ids):
        v: PairVerdict = getattr(given, f"r{i}")
        verdicts[rubric_id] = (v.first, v.second, v.explanation)
    return Answer(
        verdicts,
        value.gatekeeper,  # type: ignore[attr-defined]
        value.preferred,  # type: ignore[attr-defined]
        value.justification,  # type: ignore[attr-defined]
        attempts,
    )


# --- the prompt -------------------------------------------------------------------------------------------------


class _RubricView(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    criterion: str
    points: float
    meta_class: str
    rule: str | None = None


class _PairView(msgspec.Struct, frozen=True, omit_defaults=True):
    prompt: str
    first: str
    second: str
    reference: str | None = None


def system_message(template: str, rubric_set: RubricSet) -> str:
    """Instructions plus the rubric list: identical for every comparison under one version."""
    rubrics = [_RubricView(r.id, r.criterion, r.points, r.meta_class, rule_of(r)) for r in rubric_set.rubrics]
    return f"{template.rstrip()}\n{prompts.block('rubrics', rubrics)}\n"


def messages(system: str, comparison: Comparison, order: Order, max_chars: int | None = None) -> list[dict[str, str]]:
    """The chat messages of one judge call: the comparison as data, its responses in `order`; with `max_chars`
    (the agent's prompt budget, LLMSettings.prompt_chars) the texts are cut to fit beside `system`, with a
    marker."""
    first, second = (comparison.response_a, comparison.response_b)
    if order == "BA":
        first, second = second, first
    texts = [comparison.prompt, first, second, comparison.reference or ""]
    if max_chars is not None:
        texts = prompts.fit(texts, max(max_chars - len(system), 2 * _FRAME_CHARS) - _FRAME_CHARS)
    prompt, first, second, reference = texts
    data = prompts.block("comparison", _PairView(prompt, first, second, reference or None))
    return [{"role": "system", "content": system}, {"role": "user", "content": data}]


# --- deciding ---------------------------------------------------------------------------------------------------


def rule_of(rubric: Rubric) -> str | None:
    """The rubric's `rule` (hard_rule / principle) where the set records one (generated sets)."""
    rule = getattr(rubric, "rule", None)
    return str(rule) if rule is not None else None


def passes(rubric: Rubric, met: bool) -> bool:
    """Meeting a positive rubric, or not meeting a negative one (undesirable behaviour)."""
    return met if rubric.points >= 0 else not met


def _other(winner: Winner) -> Winner:
    return "B" if winner == "A" else "A"


def decide(
    rubrics: Sequence[Rubric],
    met: Mapping[str, tuple[bool, bool]],
    *,
    ties: bool,
    judge_gatekeeper: str | None = None,
    judge_preferred: Winner | None = None,
) -> tuple[Winner, str | None]:
    """(winner, gatekeeper rubric id) of one order from `met` (rubric id -> (A met, B met)); the module's rule."""
    separating = [r for r in rubrics if passes(r, met[r.id][0]) != passes(r, met[r.id][1])]

    def favours(r: Rubric) -> Winner:
        return "A" if passes(r, met[r.id][0]) else "B"

    for r in separating:
        if rule_of(r) == "hard_rule":
            return favours(r), r.id
    net_a = net_points(rubrics, {i: m[0] for i, m in met.items()})
    net_b = net_points(rubrics, {i: m[1] for i, m in met.items()})
    if net_a != net_b:
        winner: Winner = "A" if net_a > net_b else "B"
        deciding = [r for r in separating if favours(r) == winner]
        heaviest = max(deciding, key=lambda r: abs(r.points)) if deciding else None  # max keeps the first of equals
        return winner, heaviest.id if heaviest else None
    if ties:
        return "tie", None
    chosen = next((r for r in separating if r.id == judge_gatekeeper), None)
    if chosen is not None:
        return favours(chosen), chosen.id
    if judge_preferred in ("A", "B"):
        return judge_preferred, None
    return "tie", None


def net_points(rubrics: Sequence[Rubric], met: Mapping[str, bool]) -> float:
    """The sum of the points of the rubrics met (negative ones subtract), unclipped."""
    return round(sum(r.points for r in rubrics if met.get(r.id, False)), 6)


def judgment(order: Order, rubrics: Sequence[Rubric], answer: Answer, *, ties: bool) -> OrderJudgment:
    """One order's answer in A/B terms, with its winner (`decide`)."""
    swap = order == "BA"
    met: dict[str, tuple[bool, bool]] = {}
    for r in rubrics:
        first, second, _ = answer.verdicts[r.id]
        met[r.id] = (second, first) if swap else (first, second)
    positions: dict[str, Winner] = {"first": "B" if swap else "A", "second": "A" if swap else "B", "tie": "tie"}
    preferred = positions.get(answer.preferred)
    known = {r.id for r in rubrics}
    gatekeeper = answer.gatekeeper if answer.gatekeeper in known else None
    winner, deciding = decide(rubrics, met, ties=ties, judge_gatekeeper=gatekeeper, judge_preferred=preferred)
    return OrderJudgment(
        order=order,
        winner=winner,
        gatekeeper=deciding,
        points_a=net_points(rubrics, {i: m[0] for i, m in met.items()}),
        points_b=net_points(rubrics, {i: m[1] for i, m in met.items()}),
        results=[
            PairResult(
                rubric_id=r.id,
                points=r.points,
                a_met=met[r.id][0],
                b_met=met[r.id][1],
                explanation=answer.verdicts[r.id][2],
            )
            for r in rubrics
        ],
        judge_preferred=preferred,
        judge_gatekeeper=gatekeeper,
        justification=answer.justification,
        attempts=answer.attempts,
    )


@dataclass(frozen=True)
class Aggregate:
    winner: Winner | None
    consistent: bool | None
    gatekeeper: str | None
    justification: str


def aggregate(judgments: Sequence[OrderJudgment]) -> Aggregate:
    """The winner over the orders asked (the module's rule): the first order's, if every order agrees."""
    first = judgments[0]
    if len(judgments) == 1:
        return Aggregate(first.winner, None, first.gatekeeper, first.justification)
    if all(j.winner == first.winner for j in judgments):
        return Aggregate(first.winner, True, first.gatekeeper, first.justification)
    said = "; ".join(
        f"{'A' if j.order == 'AB' else 'B'} shown first: {j.winner}"
        + (f" (gatekeeper {j.gatekeeper})" if j.gatekeeper else "")
        for j in judgments
    )
    return Aggregate(None, False, None, f"inconsistent: the preference depends on the order ({said})")


# --- judging one comparison -------------------------------------------------------------------------------------


# (messages, answer type) -> (the answer, the LLM client's tries)
PairJudge = Callable[[list[dict[str, str]], type[msgspec.Struct]], Awaitable[tuple[msgspec.Struct, int]]]


def judge_by(call: Caller) -> PairJudge:
    """The pairwise judge that asks through `call` (caller.caller)."""

    async def judge(messages: list[dict[str, str]], answer: type[msgspec.Struct]) -> tuple[msgspec.Struct, int]:
        done = await call(messages, answer)
        return done.value, done.attempts

    return judge


async def judge_comparison(
    comparison: Comparison,
    rubric_set: RubricSet,
    system: str,
    call: PairJudge,
    *,
    both_orders: bool = True,
    ties: bool = True,
    max_chars: int | None = None,
) -> Preference:
    """Judge `comparison` under `rubric_set` (`system`: system_message of it) in one or both orders.

    A judge that fails in any order yields status judge_failed and no winner, never a guess.
    """
    started = time.perf_counter()
    rubrics = rubric_set.rubrics
    ids = tuple(r.id for r in rubrics)
    orders: list[Order] = ["AB", "BA"] if both_orders else ["AB"]
    base: dict[str, Any] = {
        "run_id": comparison.run_id,
        "comparison_id": comparison.comparison_id,
        "step": comparison.step,
        "rubric_version": rubric_set.version,
        "instance_key": rubric_set.instance_key,
        "label": comparison.label,
    }

    async def ask(order: Order) -> OrderJudgment:
        value, attempts = await call(messages(system, comparison, order, max_chars), answer_type(ids))
        return judgment(order, rubrics, read_answer(value, ids, attempts), ties=ties)

    answered = await asyncio.gather(*(ask(o) for o in orders), return_exceptions=True)
    for outcome in answered:
        if isinstance(outcome, BaseException) and not isinstance(outcome, JudgeFailed):
            raise outcome
    failed = [f"{o}: {e}" for o, e in zip(orders, answered) if isinstance(e, JudgeFailed)]
    if failed:
        return Preference(
            **base,
            status=JudgeStatus.JUDGE_FAILED,
            error="; ".join(failed),
            judge_ms=_ms(started),
            judged_at=time.time(),
        )
    judgments = [j for j in answered if isinstance(j, OrderJudgment)]
    decided = aggregate(judgments)
    classes = {r.id: r.meta_class for r in rubrics}
    return Preference(
        **base,
        status=JudgeStatus.OK,
        winner=decided.winner,
        consistent=decided.consistent,
        results=judgments[0].results,
        orders=judgments,
        gatekeeper=decided.gatekeeper,
        meta_class=classes.get(decided.gatekeeper or ""),
        justification=decided.justification,
        correct=None if comparison.label is None else decided.winner == comparison.label,
        format_ok=True,
        judge_ms=_ms(started),
        judged_at=time.time(),
    )


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
