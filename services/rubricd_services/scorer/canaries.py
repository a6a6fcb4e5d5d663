"""Canaries during training: a few labelled items judged per step of a run, to catch its judge drifting.

The scorer tells `Canaries.seen` of each rollout (no I/O on the rollout's path). For each new step of a run
with a labelled set (the run's own, `Keys.canary_set`, else RUBRICD_CANARY_SET), the first scorer to claim the
step judges that step's share of the set in the background, as `rubricd judge eval` judges (`run.judge_item`:
the scorer's judge prompt, schema, context fitting and LLM client, no verdict cache), and records the agreement
with the labels (`rubricd.canaries.CanaryStep`). `judge_drift` fires at the step where agreement falls below the
floor, or more than the margin below the run's first canary steps. Canaries never count as rollouts of a step,
never enter the memory loop or the meta-class statistics; their calls go into the run's usage under their own
agent, `canary`. Why and how: docs/researchers/judges.md, "Canaries during training".
"""

import asyncio
import collections
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import msgspec
from pydantic import BaseModel, Field, field_validator
from redis.exceptions import WatchError

from rubricd import wire
from rubricd.canaries import CLAIMED, CanaryStep, parse
from rubricd.messages import Event, EventKind, Rollout
from rubricd_services.common import usage
from rubricd_services.common.events import event
from rubricd_services.common.service import Clients
from rubricd_services.judges.evaluation import figures, labelled
from rubricd_services.judges.evaluation.labelled import Item
from rubricd_services.judges.evaluation.run import Config, Judged, judge_item

CANARY = "canary"  # the agent its calls are counted under in a run's usage
SEEN = 4096  # (run, step) pairs a scorer remembers having seen
log = logging.getLogger("rubricd.canaries")


class CanarySettings(BaseModel):
    """The scorer's canary settings (RUBRICD_CANARY_*)."""

    canary_set: Path | None = Field(
        None,
        description="a labelled JSONL (`rubricd judge eval`'s format) whose items the scorers judge a few of per "
        "step of every run, to measure the judge during training; a run's own (`rubricd judge canaries`) replaces "
        "it; unset: canaries only for runs with their own",
    )
    canary_items: int = Field(4, ge=1, le=100, description="canary items judged per step of a run")
    canary_floor: float = Field(
        0.6, ge=0, le=1, description="judge_drift fires when a step's canary agreement falls below this"
    )
    canary_margin: float = Field(
        0.15,
        ge=0,
        le=1,
        description="judge_drift fires when a step's canary agreement is this far below the run's baseline (the "
        "mean over its first canary_baseline_steps canary steps)",
    )
    canary_baseline_steps: int = Field(3, ge=1, description="the run's first N canary steps make its baseline")

    @field_validator("canary_set")
    @classmethod
    def _readable(cls, path: Path | None) -> Path | None:
        if path is not None:
            try:
                items = labelled.read(path)
            except (OSError, labelled.Invalid) as e:
                raise ValueError(f"not a labelled set: {e}") from None
            if not items:
                raise ValueError(f"not a labelled set: {path} has no item")
        return path


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


def outcome(
    step: int, rubric_version: int, judged: Sequence[Judged], earlier: Sequence[CanaryStep], rule: Rule
) -> CanaryStep:
    """One step's canaries from its judged items and the run's earlier canary steps (in step order)."""
    answered = [j for j in judged if not j.error]
    found = figures.agreement([(j.labels[r], j.verdicts[r]) for j in answered for r in j.labels])
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
        prompt_tokens=sum(j.prompt_tokens for j in judged),
        completion_tokens=sum(j.completion_tokens for j in judged),
        judged_at=time.time(),
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
    """A scorer's canaries: which steps it has seen, and the background tasks judging the ones it claimed."""

    def __init__(
        self,
        settings: CanarySettings,
        clients: Clients,
        config: Config,
        *,
        service: str,
        ttl_s: int,
        maxlen: int,
        observe: Callable[[str, CanaryStep], None] = lambda run_id, latest: None,
    ) -> None:
        self.clients, self.redis, self.keys = clients, clients.redis, clients.keys
        self.config, self.service, self.ttl_s, self.maxlen, self.observe = config, service, ttl_s, maxlen, observe
        self.n = settings.canary_items
        self.rule = Rule(settings.canary_floor, settings.canary_margin, settings.canary_baseline_steps)
        self.default = labelled.read(settings.canary_set) if settings.canary_set else []
        self._own: dict[str, tuple[bytes, list[Item]]] = {}  # run -> its own set as read last, and its items
        self._seen: collections.OrderedDict[tuple[str, int], None] = collections.OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def seen(self, rollout: Rollout, rubric_version: int) -> None:
        """A rollout was scored with `rubric_version`: the first of its step this scorer sees starts that step's
        canaries, in the background (evaluation rollouts start none)."""
        key = (rollout.run_id, rollout.step)
        if rollout.evaluation or key in self._seen:
            return
        self._seen[key] = None
        if len(self._seen) > SEEN:
            self._seen.popitem(last=False)
        task = asyncio.create_task(self.judge_step(rollout.run_id, rollout.step, rubric_version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Cancel the canaries being judged (a step's claim stays: its canaries are not judged again)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def judge_step(self, run_id: str, step: int, rubric_version: int) -> None:
        try:
            items = await self.items(run_id)
            if not items or not await self.claim(run_id, step):
                return
            judged = await asyncio.gather(
                *(judge_item(self.clients.llm, self.config, i) for i in pick(items, step, self.n))
            )
            steps = await self.commit(run_id, step, rubric_version, judged)
            self.observe(run_id, steps[-1])
        except Exception as e:
            if not self.clients.outages.down(f"judging the canaries of run {run_id} step {step}", e):
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
        key = self.keys.canaries(run_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, CLAIMED + str(step).encode(), self.clients.consumer)
            pipe.expire(key, self.ttl_s)
            claimed, _ = await pipe.execute()
        return bool(claimed)

    async def commit(self, run_id: str, step: int, rubric_version: int, judged: Sequence[Judged]) -> list[CanaryStep]:
        """Decide the step's drift against every canary step of the run recorded before it, whichever scorer
        recorded it, and record it with its usage under `canary` and its events: one optimistic transaction (WATCH,
        tried again if another step was recorded meanwhile). The run's canary steps after it, in order."""
        calls = [j for j in judged if j.prompt_tokens or j.completion_tokens or not j.error]
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
                    canary = outcome(step, rubric_version, judged, earlier, self.rule)
                    pipe.multi()
                    pipe.hset(key, str(step), msgspec.json.encode(canary))
                    pipe.expire(key, self.ttl_s)
                    for name, n in spent.items():
                        pipe.hincrby(self.keys.usage(run_id), name, n)
                    events = self.events(run_id, canary, starts_drift(canary, earlier))
                    for event in events:
                        pipe.xadd(self.keys.events, wire.entry(event), maxlen=self.maxlen, approximate=True)
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
        events = [event(self.service, EventKind.CANARIES_JUDGED, run_id=run_id, step=canary.step, **fields)]
        if drift:
            detail = why(canary, self.rule)
            events.append(
                event(self.service, EventKind.JUDGE_DRIFT, run_id=run_id, step=canary.step, detail=detail, **fields)
            )
        return events
