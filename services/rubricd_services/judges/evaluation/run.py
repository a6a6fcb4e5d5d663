"""Judging a labelled set with one judge configuration, and what came of it.

The judge is the scorer's (judges.scoring): its prompts (a text rollout's, a trajectory's, a group's), verdict
schema, context fitting and reward policy, called through the LLM client (dialects, retries, rate limits) with no
verdict cache, since a cached verdict agrees with itself. A configuration judges in one mode: each item alone, or
the items of a sample group together, by one call or by votes.
"""

import asyncio
import dataclasses
import re
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from rubricd.messages import JudgeMode, Rollout, RubricSet, Score
from rubricd_services.judges import verdicts
from rubricd_services.judges.caller import Tally, caller
from rubricd_services.judges.scoring import Judging, ReadySet, Scoring, judge_by, score_group, score_rollout
from rubricd_services.judges.verdicts import JUDGE
from rubricd_services.llm import Completion, LLMClient
from rubricd_services.rubrics.policies import policy
from rubricd_services.rubrics.sets import InForce
from rubricd_services.settings import LLMSettings, Price

from . import figures, labelled, probes
from .figures import Agreement
from .labelled import Item
from .probes import ProbeResult

RUN = "judge-eval"
POLICY = "weighted_sum"  # the labelled reward and the judge's: the weighted sum over every rubric


@dataclass(frozen=True)
class Mode:
    """How the items are judged: each alone (`single`), or with the items of its sample group (`group`: those
    sharing Item.group, in one call per sub-group, as the scorer judges a group); by `votes` calls whose majority
    decides each rubric. Named `single`, `group`, `votes3` (single, 3 votes), `group+votes3`."""

    judging: JudgeMode = "single"
    votes: int = 1

    def __str__(self) -> str:
        if self.votes == 1:
            return self.judging
        return f"votes{self.votes}" if self.judging == "single" else f"group+votes{self.votes}"

    @classmethod
    def named(cls, name: str) -> "Mode":
        """The mode `name` says (`votes` alone: 3 votes); raises ValueError on another."""
        judging: JudgeMode = "single"
        votes = 1
        for part in name.strip().split("+"):
            if part in ("single", "group"):
                judging = "group" if part == "group" else judging
            elif found := re.fullmatch(r"votes([1-9]?)", part):
                votes = int(found[1] or 3)
            else:
                raise ValueError(f"{name!r}: a mode is single, group, votes, votesK (K 1-9) or group+votesK")
        return cls(judging, votes)


@dataclass(frozen=True)
class Config:
    """One judge configuration: a name for the table, the judging (scoring.Judging: the judge's LLM settings,
    prompts and style), and its mode."""

    name: str
    judging: Judging
    mode: Mode = Mode()

    @property
    def llm(self) -> LLMSettings:
        return self.judging.llm

    @property
    def template(self) -> str:
        return self.judging.template

    @property
    def style(self) -> verdicts.Style:
        return self.judging.style


@dataclass(frozen=True)
class Judged:
    """One item as the judge saw it: its verdicts (empty: the call failed, `error` says why) and rewards. Judged
    with its group, its calls and tokens are the group's, made for `share` items."""

    item_id: str
    labels: dict[str, bool]
    meta_classes: dict[str, str]
    verdicts: dict[str, bool] = field(default_factory=dict)
    labelled_reward: float = 0.0
    reward: float | None = None
    error: str | None = None
    seconds: float = 0.0  # judging the item (its group): its one call, or its calls made at once
    calls: int = 0
    prompt_tokens: int = 0  # of all its calls
    completion_tokens: int = 0
    share: int = 1  # the items its calls judged: its group's members, or itself
    graders: dict[str, list[bool]] = field(default_factory=dict)  # several graders' labels, where given
    # A trajectory's turn rubrics labelled turn by turn: per rubric id, the policy turns labelled met and those
    # the judge named met; and the policy turns.
    turn_labels: dict[str, list[int]] = field(default_factory=dict)
    met_turns: dict[str, list[int]] = field(default_factory=dict)
    policy_turns: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    """A configuration's figures over a labelled set (what `rubricd judge eval` prints, and `--json` writes)."""

    name: str
    model: str
    output_mode: str
    temperature: float
    calls: str  # the judge's style: every rubric in one call (one) or per_rubric
    explain: bool  # each verdict with its explanation, or the verdict alone
    items: int
    format_failures: int  # items whose judge call gave no usable verdict
    judge_mode: str  # Mode's name: single, group, votes3, ...
    overall: Agreement
    by_meta_class: dict[str, Agreement]
    by_rubric: dict[str, Agreement]
    reward_error: float | None  # the mean of |judge reward - labelled reward| over the items judged
    latency_p50_s: float | None
    latency_p95_s: float | None
    prompt_tokens_per_call: float | None
    completion_tokens_per_call: float | None
    cost: float | None  # of every call, by RUBRICD_PRICES; None when the model has no price (probes' calls apart)
    judged: list[Judged]
    probes: list[ProbeResult] = field(default_factory=list)
    # With several graders per rubric (HealthBench's meta-evaluation): the judge against each grader's label, and
    # the graders against each other (every ordered pair of two graders of a rubric), as HealthBench reports them.
    pairwise: Agreement | None = None
    graders_pairwise: Agreement | None = None
    # Turn rubrics labelled turn by turn: one verdict per rubric and policy turn, met where the turn is named met.
    turns: Agreement | None = None
    # Per item (a rollout), over every item: judge calls and prompt tokens; and the wall time of judging them all.
    calls_per_rollout: float | None = None
    prompt_tokens_per_rollout: float | None = None
    wall_s: float | None = None


def prepared(config: Config, item: Item) -> ReadySet:
    """The item's rubrics, ready to judge with as the scorer prepares a set."""
    return config.judging.prepare(InForce(RubricSet(run_id=RUN, version=1, rubrics=item.rubrics)))


async def judge_item(llm: LLMClient, config: Config, item: Item) -> Judged:
    """Judge one item as the scorer would judge a rollout with these rubrics (by `config.mode.votes` calls)."""
    rollout = item.rollout(RUN)
    tally = Tally(JUDGE)
    started = time.perf_counter()
    scoring = Scoring(prepared(config, item), POLICY)
    score = await score_rollout(rollout, scoring, judge_by(caller(llm, tally)), votes=config.mode.votes)
    elapsed = time.perf_counter() - started
    calls = tally.completions
    return judged(item, rollout, score, elapsed if len(calls) != 1 else calls[0].elapsed_s, calls)


async def judge_group(llm: LLMClient, config: Config, members: list[Item]) -> list[Judged]:
    """Judge the items of one sample group together, as the scorer judges a group (score_group); each item gets
    its share of the group's calls and tokens. A group of one is judged alone."""
    if len(members) == 1:
        return [await judge_item(llm, config, members[0])]
    group = members[0].group or members[0].id
    rollouts = [
        msgspec.structs.replace(m.rollout(RUN), rollout_id=f"member-{i}", group=group, group_size=len(members))
        for i, m in enumerate(members)
    ]
    tally = Tally(JUDGE)
    started = time.perf_counter()
    scoring = Scoring(prepared(config, members[0]), POLICY)
    judge = judge_by(caller(llm, tally))
    scores = await score_group(rollouts, scoring, judge, group=f"{RUN}/{group}", votes=config.mode.votes)
    elapsed = time.perf_counter() - started  # the sub-groups' calls are made at once
    return [
        judged(m, r, s, elapsed, tally.completions, len(members))
        for m, r, s in zip(members, rollouts, scores, strict=True)
    ]


async def judge_all(llm: LLMClient, config: Config, items: Sequence[Item]) -> list[Judged]:
    """Judge every item in `config.mode`: each alone, or each sample group together; in the items' order."""
    if config.mode.judging == "single":
        return list(await asyncio.gather(*(judge_item(llm, config, item) for item in items)))
    done = await asyncio.gather(*(judge_group(llm, config, g) for g in labelled.grouped(list(items))))
    by_id = {j.item_id: j for group in done for j in group}
    return [by_id[item.id] for item in items]


def judged(
    item: Item, rollout: Rollout, score: Score, seconds: float, calls: Sequence[Completion[object]], share: int = 1
) -> Judged:
    """The item as judged: the score's verdicts against the labels, and `calls` (made for `share` items)."""
    labelled_reward = policy(POLICY)(item.rubrics, item.labels).total
    return Judged(
        item_id=item.id,
        labels=dict(item.labels),
        meta_classes={r.id: r.meta_class for r in item.rubrics},
        verdicts={r.rubric_id: r.met for r in score.results},
        labelled_reward=labelled_reward if labelled_reward is not None else 0.0,
        reward=score.reward,
        error=score.error,
        seconds=seconds,
        calls=len(calls),
        prompt_tokens=sum(c.prompt_tokens for c in calls),
        completion_tokens=sum(c.completion_tokens for c in calls),
        share=share,
        graders=dict(item.graders),
        turn_labels={k: list(v.met_turns) for k, v in item.turn_labels.items()},
        met_turns={r.rubric_id: list(r.met_turns) for r in score.results if r.rubric_id in item.turn_labels},
        policy_turns=rollout.policy_turns,
    )


async def evaluate(
    config: Config, items: Sequence[Item], prices: Mapping[str, Price], *, probe: bool = False, **llm: object
) -> Report:
    """Judge every item with `config` in its mode (at most the judge's `concurrency` calls at once) and report the
    figures; with `probe`, judge them again under each of `probes.PROBES` (the items each applies to, a group's
    changed items together; a probe that applies to none is left out). `llm`: passed to LLMClient (its Redis, for
    shared rate limits)."""
    async with LLMClient({JUDGE: config.llm}, **llm) as client:  # type: ignore[arg-type]
        if config.llm.output_mode == "auto":
            await client.detect([JUDGE])
        output_mode = client.output_mode(JUDGE)
        started = time.perf_counter()
        judged = await judge_all(client, config, items)
        wall_s = time.perf_counter() - started
        probed = []
        for p in probes.PROBES if probe else ():
            changed = [(j, c) for j, item in zip(judged, items, strict=True) if (c := p.change(item)) is not None]
            if changed:
                again = await judge_all(client, config, [c for _, c in changed])
                probed.append(probes.result(p, [j for j, _ in changed], again))
    return dataclasses.replace(report(config, output_mode, judged, prices, wall_s), probes=probed)


def report(
    config: Config,
    output_mode: str,
    judged: Sequence[Judged],
    prices: Mapping[str, Price],
    wall_s: float | None = None,
) -> Report:
    """The figures of judged items (no LLM: a test hands in verdicts and labels)."""
    answered = [j for j in judged if not j.error]
    pairs = [(j.labels[r], j.verdicts[r]) for j in answered for r in j.labels]
    by_class: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    by_rubric: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for j in answered:
        for rubric_id, label in j.labels.items():
            by_class[j.meta_classes[rubric_id]].append((label, j.verdicts[rubric_id]))
            by_rubric[rubric_id].append((label, j.verdicts[rubric_id]))
    calls = [j for j in judged if j.prompt_tokens or j.completion_tokens or not j.error]
    graded = [(j, r, labels) for j in answered for r, labels in j.graders.items()]
    pairwise = [(label, j.verdicts[r]) for j, r, labels in graded for label in labels]
    among = [
        (other, label)
        for _, _, labels in graded
        for i, label in enumerate(labels)
        for k, other in enumerate(labels)
        if i != k
    ]
    turns = [
        (t in labelled, t in j.met_turns.get(r, ()))
        for j in answered
        for r, labelled in j.turn_labels.items()
        for t in j.policy_turns
    ]
    price = prices.get(config.llm.model)
    prompt_tokens = sum(j.prompt_tokens / j.share for j in judged)
    completion_tokens = sum(j.completion_tokens / j.share for j in judged)
    return Report(
        name=config.name,
        model=config.llm.model,
        output_mode=output_mode,
        temperature=config.llm.temperature,
        calls=config.style.calls,
        explain=config.style.explain,
        items=len(judged),
        format_failures=len(judged) - len(answered),
        judge_mode=str(config.mode),
        overall=figures.agreement(pairs),
        by_meta_class={c: figures.agreement(p) for c, p in sorted(by_class.items())},
        by_rubric={r: figures.agreement(p) for r, p in sorted(by_rubric.items())},
        reward_error=figures.mean([abs(j.reward - j.labelled_reward) for j in answered if j.reward is not None]),
        latency_p50_s=figures.percentile([j.seconds for j in judged], 50),
        latency_p95_s=figures.percentile([j.seconds for j in judged], 95),
        prompt_tokens_per_call=figures.mean([j.prompt_tokens / j.share for j in calls]),
        completion_tokens_per_call=figures.mean([j.completion_tokens / j.share for j in calls]),
        cost=None if price is None else price.cost(round(prompt_tokens), round(completion_tokens)),
        judged=list(judged),
        pairwise=figures.agreement(pairwise) if pairwise else None,
        graders_pairwise=figures.agreement(among) if among else None,
        turns=figures.agreement(turns) if turns else None,
        calls_per_rollout=figures.mean([j.calls / j.share for j in judged]),
        prompt_tokens_per_rollout=figures.mean([j.prompt_tokens / j.share for j in judged]),
        wall_s=wall_s,
    )
