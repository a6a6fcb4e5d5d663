"""Judging labelled comparisons with the pairwise judge (the comparer's, judges.pairwise), and what came of it: the pointwise
figures over the labelled winner, plus position consistency.

A comparison is judged in both orders; a preference that flips with the order (no winner) or a tie where a
winner is labelled counts as wrong, as `rubricd accuracy` counts it.
"""

import asyncio
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from rubricd.messages import Comparison, JudgeStatus, Rubric, RubricSet
from rubricd.messages.comparisons import Winner
from rubricd_services.judges import pairwise
from rubricd_services.judges.caller import Tally, caller
from rubricd_services.llm import LLMClient
from rubricd_services.settings import Price

from . import figures
from .figures import Agreement
from .labelled import Invalid, decoded
from .run import RUN, Config


class Pair(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One labelled comparison: which of two responses to `prompt` is preferred (`label`), under `rubrics`."""

    id: str
    prompt: str
    response_a: str
    response_b: str
    reference: str | None = None
    label: Winner
    rubrics: list[Rubric]
    note: str = ""


_decoder = msgspec.json.Decoder(Pair)


def pairs(lines: list[str], source: str = "<pairs>") -> Iterator[Pair]:
    """Every labelled comparison of these JSONL lines; raises Invalid, naming the line and field, at a bad one."""
    seen: set[str] = set()
    for number, pair in decoded(lines, _decoder, source):
        if not pair.rubrics:
            raise Invalid(f"{source}:{number}: `$.rubrics`: no rubric to judge with")
        if pair.label == "tie":
            raise Invalid(f'{source}:{number}: `$.label`: a labelled comparison names its winner, "A" or "B"')
        if pair.id in seen:
            raise Invalid(f"{source}:{number}: `$.id`: {pair.id!r} repeats an earlier line's")
        seen.add(pair.id)
        yield pair


@dataclass(frozen=True)
class PairJudged:
    """One comparison as the judge saw it (`winner` None: no winner, `consistent` False: it flipped)."""

    item_id: str
    label: Winner
    winner: Winner | None = None
    consistent: bool | None = None
    error: str | None = None
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class PairReport:
    """A pairwise judge configuration's figures over labelled comparisons (`overall`: "A" is the positive
    class; a missed winner counts as the other one)."""

    name: str
    model: str
    output_mode: str
    temperature: float
    items: int
    format_failures: int
    overall: Agreement
    position_consistency: float | None  # the same winner in both orders / comparisons judged
    latency_p50_s: float | None  # of a comparison, both orders
    latency_p95_s: float | None
    prompt_tokens_per_call: float | None
    completion_tokens_per_call: float | None
    cost: float | None
    judged: list[PairJudged]


async def judge_pair(llm: LLMClient, config: Config, pair: Pair) -> PairJudged:
    rubric_set = RubricSet(run_id=RUN, version=1, rubrics=pair.rubrics)
    comparison = Comparison(
        run_id=RUN,
        comparison_id="pair",
        prompt=pair.prompt,
        response_a=pair.response_a,
        response_b=pair.response_b,
        reference=pair.reference,
        label=pair.label,
    )
    tally = Tally(pairwise.PAIRWISE)
    started = time.perf_counter()
    system = pairwise.system_message(config.template, rubric_set)
    judge = pairwise.judge_by(caller(llm, tally))
    p = await pairwise.judge_comparison(
        comparison, rubric_set, system, judge, both_orders=True, ties=False, max_chars=config.llm.prompt_chars()
    )
    calls = tally.completions
    return PairJudged(
        item_id=pair.id,
        label=pair.label,
        winner=p.winner,
        consistent=p.consistent,
        error=p.error if p.status is not JudgeStatus.OK else None,
        seconds=time.perf_counter() - started,
        prompt_tokens=sum(c.prompt_tokens for c in calls),
        completion_tokens=sum(c.completion_tokens for c in calls),
    )


async def evaluate_pairs(
    config: Config, items: Sequence[Pair], prices: Mapping[str, Price], **llm: object
) -> PairReport:
    """Judge every comparison with `config` (the pairwise judge's settings and prompt) and report the figures."""
    async with LLMClient({pairwise.PAIRWISE: config.llm}, **llm) as client:  # type: ignore[arg-type]
        if config.llm.output_mode == "auto":
            await client.detect([pairwise.PAIRWISE])
        output_mode = client.output_mode(pairwise.PAIRWISE)
        judged = await asyncio.gather(*(judge_pair(client, config, pair) for pair in items))
    return pair_report(config, output_mode, judged, prices)


def pair_report(
    config: Config, output_mode: str, judged: Sequence[PairJudged], prices: Mapping[str, Price]
) -> PairReport:
    """The figures of judged comparisons (no LLM: a test hands in winners and labels)."""
    answered = [j for j in judged if not j.error]
    # A missed winner (flipped, or a tie) is the wrong answer: said "A" exactly when the label is not "A".
    pairs_ = [(j.label == "A", j.winner == "A" if j.winner in ("A", "B") else j.label != "A") for j in answered]
    price = prices.get(config.llm.model)
    prompt_tokens, completion_tokens = sum(j.prompt_tokens for j in judged), sum(j.completion_tokens for j in judged)
    calls = 2 * len(judged)
    return PairReport(
        name=config.name,
        model=config.llm.model,
        output_mode=output_mode,
        temperature=config.llm.temperature,
        items=len(judged),
        format_failures=len(judged) - len(answered),
        overall=figures.agreement(pairs_),
        position_consistency=figures.mean([1.0 if j.consistent else 0.0 for j in answered]),
        latency_p50_s=figures.percentile([j.seconds for j in judged], 50),
        latency_p95_s=figures.percentile([j.seconds for j in judged], 95),
        prompt_tokens_per_call=prompt_tokens / calls if calls else None,
        completion_tokens_per_call=completion_tokens / calls if calls else None,
        cost=None if price is None else price.cost(prompt_tokens, completion_tokens),
        judged=list(judged),
    )
