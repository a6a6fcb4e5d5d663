"""Canaries during training: a few labelled items judged per step of a run, to catch its judge drifting.

Beside the scoring path, in the scorer's process: the commit of a step's first score (scorer.effects) puts its
event on the canary-steps stream, once per run and step, and the canaries read that stream in a consumer group of
their own (`CANARIES`): run, step and rubric version are all they need, so a rollout is answered without waiting on
them and costs them nothing. For each new step of a run with a labelled set (the run's own, `Keys.canary_set`, else
RUBRICD_CANARY_SET, read once at start), the first scorer to claim the step judges that step's share of the set, as
`rubricd judge eval` judges (`run.judge_item`: the scorer's judge prompt, schema, context fitting and LLM client, no
verdict cache), and records the agreement with the labels (`rubricd_services.state.canaries.CanaryStep`). `judge_drift` fires at
the step where agreement falls below the floor, or more than the margin below the run's first canary steps.
While the run has a candidate in shadow (promotion gated), each item is judged a second time with the candidate's
changed rubrics after its own in the same calls, as a scorer judges a rollout in shadow: the gate compares the two
agreements (interference).
Canaries never count as rollouts of a step, never enter the memory loop or the meta-class statistics; their calls
go into the run's usage under their own agent, `canary`. Why and how: docs/researchers/judges.md, "Canaries during
training".
"""

import asyncio
import collections
import functools
import logging
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec
from faststream.redis.message import RedisStreamMessage
from redis.asyncio import Redis
from redis.exceptions import WatchError

from rubricd import wire
from rubricd.keys import CANARIES
from rubricd.messages import Candidate, Event, EventKind
from rubricd_services.judges.scoring import Judging
from rubricd_services.judges.settings import CanarySettings, JudgeSettings
from rubricd_services.llm import usage
from rubricd_services.runtime import intake
from rubricd_services.runtime.events import Events, event
from rubricd_services.runtime.service import ServiceApp
from rubricd_services.settings import LLMSettings
from rubricd_services.state.canaries import CLAIMED, CanaryStep, parse
from rubricd_services.state.rubric_sets import RubricStore

from . import figures, labelled
from .labelled import Item
from .run import Config, Judged, judge_item

CANARY = "canary"  # the agent its calls are counted under in a run's usage
log = logging.getLogger("rubricd.canaries")


def read_set(path: Path | None) -> list[Item]:
    """RUBRICD_CANARY_SET's items (none when unset), read once at start: a set that cannot be read stops the
    service there, naming the setting and the line."""
    if path is None:
        return []
    try:
        items = labelled.read(path)
    except (OSError, labelled.Invalid) as e:
        sys.exit(f"invalid settings\n  RUBRICD_CANARY_SET: not a labelled set: {e}")
    if not items:
        sys.exit(f"invalid settings\n  RUBRICD_CANARY_SET: not a labelled set: {path} has no item")
    return items


def judge(settings: JudgeSettings, llm: LLMSettings) -> Config:
    """The canaries' judge: the scorer's judging configuration (its prompts, style and LLM settings), each item
    judged alone."""
    return Config(CANARY, Judging.of(settings, llm))


@dataclass(frozen=True)
class Rule:
    """When a step's agreement is drift."""

    floor: float
    margin: float
    baseline_steps: int


def pick(items: Sequence[Item], step: int, n: int) -> list[Item]:
    """Step `step`'s share of the set: `n` items from position step x n on, around the end, so that successive
    steps go through the whole set in turn."""
    n = min(n, len(items))
    return [items[(step * n + i) % len(items)] for i in range(n)]


def baseline(earlier: Sequence[CanaryStep], steps: int) -> float | None:
    """The mean agreement of the run's first `steps` canary steps with an agreement; None while there are fewer."""
    first = [c.agreement for c in earlier if c.agreement is not None][:steps]
    return statistics.fmean(first) if len(first) == steps else None


def beside(item: Item, candidate: Candidate) -> Item:
    """The item with the candidate's changed rubrics after its own, as a scorer judges a rollout in shadow, under ids
    its own rubrics do not use; its labels (its own rubrics') unchanged."""
    own = [*item.rubrics, *candidate.shadows(beside={r.id for r in item.rubrics})]
    return msgspec.structs.replace(item, rubrics=own)


@dataclass(frozen=True)
class Shadowed:
    """A step's items judged again with a candidate's changed rubrics beside their own."""

    candidate_step: int
    judged: Sequence[Judged]


def _agreement(judged: Sequence[Judged]) -> figures.Agreement:
    """The answered items' verdicts on their labelled rubrics against the labels."""
    return figures.agreement([(j.labels[r], j.verdicts[r]) for j in judged if not j.error for r in j.labels])


def outcome(
    step: int,
    rubric_version: int,
    judged: Sequence[Judged],
    earlier: Sequence[CanaryStep],
    rule: Rule,
    shadowed: Shadowed | None = None,
) -> CanaryStep:
    """One step's canaries from its judged items (and those judged with a candidate) and the run's earlier canary
    steps (in step order)."""
    answered = [j for j in judged if not j.error]
    found = _agreement(judged)
    with_candidate = _agreement(shadowed.judged) if shadowed else None
    spent = [*judged, *(shadowed.judged if shadowed else [])]
    base = baseline([c for c in earlier if c.step < step], rule.baseline_steps)
    drift = found.accuracy is not None and (
        found.accuracy < rule.floor or (base is not None and found.accuracy < base - rule.margin)
    )
    return CanaryStep(
        step=step,
        rubric_version=rubric_version,
        items=[j.item_id for j in judged],
        verdicts=found.n,
        agreed=found.true_met + found.true_unmet,
        failures=len(judged) - len(answered),
        agreement=found.accuracy,
        kappa=found.kappa,
        baseline=base,
        drift=drift,
        prompt_tokens=sum(j.prompt_tokens for j in spent),
        completion_tokens=sum(j.completion_tokens for j in spent),
        judged_at=time.time(),
        candidate_step=shadowed.candidate_step if shadowed else None,
        candidate_verdicts=with_candidate.n if with_candidate else 0,
        candidate_agreed=with_candidate.true_met + with_candidate.true_unmet if with_candidate else 0,
    )


def starts_drift(canary: CanaryStep, earlier: Sequence[CanaryStep]) -> bool:
    """Where `judge_drift` fires: the step drifts, the run's canary step recorded before it did not, and neither
    did one after it that was recorded first (steps judged out of order: that one's event said it already)."""
    before = [c for c in earlier if c.step < canary.step]
    after = [c for c in earlier if c.step > canary.step]
    return canary.drift and not (before and before[-1].drift) and not (after and after[0].drift)


def why(canary: CanaryStep, rule: Rule) -> str:
    """What made a step drift, in one line."""
    said = f"canary agreement {canary.agreement:.2f} at step {canary.step}"
    if canary.agreement is not None and canary.agreement < rule.floor:
        return f"{said} is below the floor {rule.floor:g} (canary_floor)"
    return f"{said} is more than {rule.margin:g} (canary_margin) below the run's baseline {canary.baseline:.2f}"


class Canaries:
    """A service's canaries, the consumer of the canary-steps stream's `CANARIES` group (`handle`), beside its own
    worker: the judging of the steps it claims."""

    def __init__(self, settings: CanarySettings, config: Config, app: ServiceApp[Any], *, ttl_s: int) -> None:
        self.app, self.config, self.service, self.ttl_s = app, config, app.name, ttl_s
        self.keys, self.maxlen = app.keys, app.settings.stream_maxlen
        self.n = settings.canary_items
        self.rule = Rule(settings.canary_floor, settings.canary_margin, settings.canary_baseline_steps)
        self.default = read_set(settings.canary_set)
        self.metrics = CanaryMetrics(app)
        self._own: dict[str, tuple[bytes, list[Item]]] = {}  # run -> its own set as read last, and its items

    @property
    def redis(self) -> Redis:
        return self.app.clients.redis

    @functools.cached_property
    def store(self) -> RubricStore:
        """The run's rubric set, for a candidate in shadow (made once the service's clients are)."""
        return RubricStore(self.redis, self.keys)

    async def handle(self, _: object, msg: RedisStreamMessage) -> None:
        """One canary-steps entry, the event of a step's first score (the first argument, the service's own worker,
        is not the canaries'): that step's canaries, judged and recorded, then the entry acked."""
        try:
            found = wire.decode(msg.body, Event)
        except msgspec.DecodeError:  # not an event of this version's: nothing for the canaries
            found = None
        if found and found.run_id is not None and found.step is not None:
            version = found.fields.get("rubric_version")
            if isinstance(version, int):
                await self.judge_step(found.run_id, found.step, version)
        await self.redis.xack(self.keys.canary_steps, CANARIES, intake.entry_id(msg))

    async def judge_step(self, run_id: str, step: int, rubric_version: int) -> None:
        """Judge and record the step's canaries if this process claims it (a claim stays: a step whose judging
        failed is not judged again)."""
        try:
            items = await self.items(run_id)
            if not items or not await self.claim(run_id, step):
                return
            picked = pick(items, step, self.n)
            _, candidate = await self.store.in_force(run_id)
            if candidate is not None and not candidate.changed():  # removals and reweights: nothing new to judge
                candidate = None
            with_candidate = [beside(i, candidate) for i in picked] if candidate is not None else []
            llm = self.app.clients.llm
            judged = await asyncio.gather(*(judge_item(llm, self.config, i) for i in [*picked, *with_candidate]))
            shadowed = Shadowed(candidate.step, judged[len(picked) :]) if candidate is not None else None
            steps = await self.commit(run_id, step, rubric_version, judged[: len(picked)], shadowed)
            self.metrics.observe(run_id, steps[-1])
        except Exception as e:
            if not self.app.outages.down(f"judging the canaries of run {run_id} step {step}", e):
                log.exception("%s: the canaries of run %s step %d failed", self.service, run_id, step)

    async def items(self, run_id: str) -> list[Item]:
        """The run's labelled set: its own, else the setting's (an own set that cannot be read: none, said once)."""
        raw = cast(bytes | None, await self.redis.get(self.keys.canary_set(run_id)))
        if raw is None:
            return self.default
        kept = self._own.get(run_id)
        if kept is None or kept[0] != raw:
            try:
                found = list(labelled.items(raw.decode().splitlines(), f"run {run_id}'s canary set"))
            except (labelled.Invalid, UnicodeDecodeError) as e:
                log.warning("%s: no canaries for run %s: %s", self.service, run_id, e)
                found = []
            kept = self._own[run_id] = (raw, found)
        return kept[1]

    async def claim(self, run_id: str, step: int) -> bool:
        """Whether this scorer judges the step's canaries: the first to ask does (the hash expires, claims too)."""
        key = self.keys.canary_marks(run_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, CLAIMED + str(step).encode(), self.app.consumer)
            pipe.expire(key, self.ttl_s)
            claimed, _ = await pipe.execute()
        return bool(claimed)

    async def commit(
        self, run_id: str, step: int, rubric_version: int, judged: Sequence[Judged], shadowed: Shadowed | None = None
    ) -> list[CanaryStep]:
        """Decide the step's drift against every canary step of the run recorded before it, whichever scorer
        recorded it, and record it with its usage under `canary` and its events: one optimistic transaction (WATCH,
        tried again if another step was recorded meanwhile). The run's canary steps after it, in order."""
        every = [*judged, *(shadowed.judged if shadowed else [])]
        calls = [j for j in every if j.prompt_tokens or j.completion_tokens or not j.error]
        model = self.config.llm.model
        spent: collections.Counter[str] = collections.Counter()
        for j in calls:
            spent.update(
                usage.increments(
                    CANARY,
                    model,
                    prompt_tokens=j.prompt_tokens,
                    completion_tokens=j.completion_tokens,
                    elapsed_s=j.seconds,
                )
            )
        key = self.keys.canaries(run_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    earlier = parse(cast(dict[bytes, bytes], await pipe.hgetall(key)))
                    canary = outcome(step, rubric_version, judged, earlier, self.rule, shadowed)
                    pipe.multi()
                    pipe.hset(key, str(step), msgspec.json.encode(canary))
                    pipe.expire(key, self.ttl_s)
                    for name, n in spent.items():
                        pipe.hincrby(self.keys.usage(run_id), name, n)
                    events = self.events(run_id, canary, starts_drift(canary, earlier))
                    Events(self.redis, self.keys, self.maxlen).queue(pipe, *events)
                    await pipe.execute()
                    break
                except WatchError:
                    continue
        for drift in (e for e in events if e.kind == EventKind.JUDGE_DRIFT):
            log.warning("%s: judge drift in run %s: %s", self.service, run_id, drift.detail)
        return sorted([*earlier, canary], key=lambda c: c.step)

    def events(self, run_id: str, canary: CanaryStep, drift: bool) -> list[Event]:
        """`canaries_judged`, and `judge_drift` where a drift begins."""
        fields = {
            "agreement": canary.agreement,
            "verdicts": canary.verdicts,
            "baseline": canary.baseline,
            "rubric_version": canary.rubric_version,
            "failures": canary.failures,
        }
        if canary.candidate_step is not None:
            fields |= {"candidate_step": canary.candidate_step, "candidate_agreement": canary.candidate_agreement}
        events = [event(self.service, EventKind.CANARIES_JUDGED, run_id=run_id, step=canary.step, **fields)]
        if drift:
            detail = why(canary, self.rule)
            events.append(
                event(self.service, EventKind.JUDGE_DRIFT, run_id=run_id, step=canary.step, detail=detail, **fields)
            )
        return events


class CanaryMetrics:
    """The canaries' figures: the run's latest canary step as this process last saw it (when it recorded one)."""

    def __init__(self, app: ServiceApp[Any]) -> None:
        self.agreement = app.metrics.gauge(
            "rubricd_canary_agreement",
            "the judge's agreement with the labels on the canary items of the run's latest canary step, as this "
            "scorer last saw it (when it recorded one)",
            ["run_id"],
        )
        self.step = app.metrics.gauge("rubricd_canary_step", "that canary step", ["run_id"])
        self.drift = app.metrics.gauge(
            "rubricd_judge_drift", "1 while that step's canary agreement is drift (judge_drift), else 0", ["run_id"]
        )
        self._steps: dict[str, int] = {}  # run -> its latest canary step seen

    def observe(self, run_id: str, canary: CanaryStep) -> None:
        if canary.step < self._steps.get(run_id, -1):
            return
        self._steps[run_id] = canary.step
        self.step.labels(run_id).set(canary.step)
        self.drift.labels(run_id).set(int(canary.drift))
        if canary.agreement is not None:
            self.agreement.labels(run_id).set(canary.agreement)
