"""The meta-class schedule of alternating rewards (ARL-RR): which meta-class each step of a run trains.

`choose` applies the rule (warm-up, minimum phase, then `round_robin`, `most_room` or `largest_gain`) to the
run's earlier decisions and class statistics; the scorer decides once per (run, step) and writes the decision
with a compare-and-set (`Keys.schedule`), so every scorer gives a step the same class. This is the deciding
side; the read side (decisions, statistics, `explain`) is `rubricd_services.state.schedule`.
The rules, the candidates and why `largest_gain` exploits: docs/researchers/alternating.md, "The meta-class
schedule".
"""

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event, EventKind, JudgeStatus, Rubric, Score
from rubricd_services.runtime import events
from rubricd_services.state.schedule import (
    ClassStats,
    Decision,
    Reason,
    StepStats,
    Strategy,
    explain,
    read_stats,
)

CACHED_DECISIONS = 4096  # decisions a scorer keeps in memory (they never change: a miss only costs a read)


@dataclass(frozen=True)
class Rule:
    """The schedule's settings (ScorerSettings: schedule_strategy, warmup_steps, min_phase_steps, window_steps)."""

    strategy: Strategy = "round_robin"
    warmup_steps: int = 0
    min_phase_steps: int = 1
    window_steps: int = 3

    def decisions_read(self) -> int:
        """How many of the latest decisions `choose` needs: enough for the warm-up's count, the phase's length
        and the windows (a long run's older decisions are never read)."""
        return max(1, self.warmup_steps, self.min_phase_steps, 2 * self.window_steps)

    def read_steps(self, before: Sequence[int]) -> list[int]:
        """The decided steps (of `before`, in step order) whose statistics are read: the window's, whose classes
        are candidates whatever the strategy, and for `largest_gain` the window before it."""
        return list(before[-(2 if self.strategy == "largest_gain" else 1) * self.window_steps :])

    def candidates(
        self, declared: Sequence[str], in_rubrics: Sequence[str], before: Sequence[int], stats: Mapping[int, StepStats]
    ) -> list[str]:
        """The declared classes with a positive-point rubric in the deciding rollout's set (`in_rubrics`) or a
        score in the last `window_steps` of `before`, in the declared order."""
        seen = {c for s in before[-self.window_steps :] for c, st in stats.get(s, {}).items() if st.count}
        return [c for c in declared if c in seen or c in in_rubrics]


def choose(
    step: int,
    candidates: Sequence[str],
    history: Mapping[int, Decision],
    stats: Mapping[int, StepStats],
    rule: Rule,
) -> Decision:
    """The active class of `step` given the decisions of earlier steps and the statistics of the window's steps."""
    before = sorted(s for s in history if s < step)

    def decided(meta_class: str | None, reason: Reason, **more: object) -> Decision:
        return Decision(
            step=step,
            meta_class=meta_class,
            reason=reason,
            strategy=rule.strategy,
            candidates=list(candidates),
            decided_at=time.time(),
            **more,  # type: ignore[arg-type]
        )

    if len(before) < rule.warmup_steps:
        return decided(None, "warm_up")
    if not candidates:
        return decided(None, "no_class")
    previous = history[before[-1]].meta_class if before else None
    if previous in candidates and phase_length(before, history) < rule.min_phase_steps:
        return decided(previous, "phase")
    if rule.strategy == "round_robin":
        at = candidates.index(previous) + 1 if previous in candidates else 0
        return decided(candidates[at % len(candidates)], "round_robin")
    window = before[-rule.window_steps :]
    means = recent_means(candidates, [stats.get(s, {}) for s in window])
    order = {c: i for i, c in enumerate(candidates)}
    if rule.strategy == "most_room":
        best = min(candidates, key=lambda c: (means[c] is not None, means[c] or 0.0, order[c]))
        return decided(best, "most_room", window=window, means=means)
    earlier = before[-2 * rule.window_steps : -rule.window_steps]
    gains = recent_gains(means, recent_means(candidates, [stats.get(s, {}) for s in earlier]))
    best = min(candidates, key=lambda c: (gains[c] is not None, -(gains[c] or 0.0), order[c]))
    return decided(best, "largest_gain", window=window, means=means, previous_window=earlier, gains=gains)


def candidates(rubrics: Sequence[Rubric], declared: Sequence[str]) -> list[str]:
    """The meta-classes a step may train: the declared ones (ServiceSettings.meta_classes) with a positive-point
    rubric in `rubrics`, in the declared order."""
    positive = {r.meta_class for r in rubrics if r.points > 0}
    return [c for c in declared if c in positive]


def phase_length(before: Sequence[int], history: Mapping[int, Decision]) -> int:
    """How many decisions in a row, ending with the latest of `before`, chose its class."""
    latest = history[before[-1]].meta_class
    n = 0
    for s in reversed(before):
        if history[s].meta_class != latest:
            break
        n += 1
    return n


def recent_means(candidates: Sequence[str], steps: Sequence[StepStats]) -> dict[str, float | None]:
    """Each candidate's mean over every rollout of `steps`."""
    return {c: sum((s.get(c, ClassStats()) for s in steps), ClassStats()).mean for c in candidates}


def recent_gains(means: Mapping[str, float | None], earlier: Mapping[str, float | None]) -> dict[str, float | None]:
    """Each candidate's recent mean minus its earlier one (None where either is undefined)."""
    gains: dict[str, float | None] = {}
    for c, mean in means.items():
        before = earlier[c]
        gains[c] = None if mean is None or before is None else mean - before
    return gains


def stats_increments(score: Score) -> dict[str, float]:
    """What one committed score adds to its step's statistics hash: `count:<class>` and `sum:<class>` for each
    class it has a score for, and `fallback:<class>` or `masked:<class>` where the active class had none. Only
    a training rollout's score of status ok under `alternating` counts (nothing else is ever read)."""
    if score.status is not JudgeStatus.OK or score.policy != "alternating" or score.evaluation:
        return {}
    out: dict[str, float] = {}
    for c, value in score.meta_class_scores.items():
        out[f"count:{c}"] = 1
        out[f"sum:{c}"] = value
    active = score.active_meta_class
    if active is not None and active in score.undefined_meta_classes:
        out[f"{'masked' if score.masked else 'fallback'}:{active}"] = 1
    return out


# KEYS: the run's schedule hash, the events stream. ARGV: step, decision, its event, the events' maxlen.
# Returns the step's decision: this one if it was the first, else the one already written.
_DECIDE = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', '__data__', ARGV[3])
end
return redis.call('HGET', KEYS[1], ARGV[1])
"""


class Schedule:
    """The decisions of every run, in Redis; each is read (or made) once per process and kept."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        rule: Rule,
        declared: Sequence[str],
        *,
        maxlen: int,
        service: str = "scorer",
    ) -> None:
        """`declared`: the deployment's meta-classes (ServiceSettings.meta_classes), in order."""
        self.redis = redis
        self.keys = keys
        self.rule = rule
        self.declared = list(declared)
        self.maxlen = maxlen
        self.service = service
        self._decide = redis.register_script(_DECIDE)
        self._decisions: dict[tuple[str, int], asyncio.Future[Decision]] = {}

    async def active(self, run_id: str, step: int, candidates: Sequence[str]) -> Decision:
        """The decision of (run, step): the one in Redis, else one made now (`candidates`: the classes with a
        positive-point rubric in the deciding rollout's set; Rule.candidates adds those recently scored)."""
        key = (run_id, step)
        entry = self._decisions.get(key)
        if entry is None or (entry.done() and entry.exception() is not None):
            entry = self._decisions[key] = asyncio.ensure_future(self._get(run_id, step, candidates))
            while len(self._decisions) > CACHED_DECISIONS:
                del self._decisions[next(iter(self._decisions))]
        return await asyncio.shield(entry)

    async def _get(self, run_id: str, step: int, candidates: Sequence[str]) -> Decision:
        raw = await self.redis.hget(self.keys.schedule(run_id), str(step))
        if raw is not None:
            return msgspec.json.decode(raw, type=Decision)
        history = await self._latest(run_id, step)
        before = sorted(history)
        stats = await read_stats(self.redis, self.keys, run_id, self.rule.read_steps(before))
        decision = choose(
            step, self.rule.candidates(self.declared, candidates, before, stats), history, stats, self.rule
        )
        stored = await self._decide(
            keys=[self.keys.schedule(run_id), self.keys.events],
            args=[step, msgspec.json.encode(decision), wire.encode(self.event(run_id, decision)), self.maxlen],
        )
        return msgspec.json.decode(stored, type=Decision)

    async def _latest(self, run_id: str, step: int) -> dict[int, Decision]:
        """The run's latest decisions before `step`, as many as `choose` reads (the field names, then those)."""
        key = self.keys.schedule(run_id)
        decided = sorted(s for s in map(int, cast(list[bytes], await self.redis.hkeys(key))) if s < step)
        wanted = decided[-self.rule.decisions_read() :]
        raws = cast(list[bytes | None], await self.redis.hmget(key, [str(s) for s in wanted])) if wanted else []
        return {s: msgspec.json.decode(raw, type=Decision) for s, raw in zip(wanted, raws) if raw is not None}

    def event(self, run_id: str, decision: Decision) -> Event:
        return events.event(
            self.service,
            EventKind.META_CLASS_SELECTED,
            run_id=run_id,
            step=decision.step,
            detail=explain(decision),
            meta_class=decision.meta_class,
            reason=decision.reason,
            strategy=decision.strategy,
        )
