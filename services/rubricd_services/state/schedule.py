"""The meta-class schedule of alternating rewards (ARL-RR): which meta-class each step of a run trains.

`choose` applies the rule (warm-up, minimum phase, then `round_robin`, `most_room` or `largest_gain`) to the
run's earlier decisions and class statistics; `Schedule` decides once per (run, step) for every scorer
(`Keys.schedule`, state.decisions), so every scorer gives a step the same class. The read side is here too: the
decisions and each step's class statistics (`Keys.class_stats`: per-class counts and sums, added with each
committed score, `stats_increments`), and `explain`, one line saying why a step has its class (`rubricd
schedule`, the dashboard, the demo's report). The rules, the eligible classes and why `largest_gain` exploits:
docs/researchers/alternating.md, "The meta-class schedule".
"""

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd.messages import Event, EventKind, JudgeStatus, Rubric, Score
from rubricd_services.runtime import events

from .decisions import StepDecisions

Strategy = Literal["round_robin", "most_room", "largest_gain"]
Reason = Literal["warm_up", "phase", "round_robin", "most_room", "largest_gain", "no_class"]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The active meta-class of one step of a run, and what chose it."""

    step: int
    meta_class: str | None  # None: no active class, the reward is the weighted total
    reason: Reason
    strategy: Strategy
    eligible: list[str] = msgspec.field(default_factory=list, name="candidates")  # stored as `candidates`
    window: list[int] = []  # most_room, largest_gain: the recent steps whose statistics were read
    means: dict[
        str, float | None
    ] = {}  # most_room, largest_gain: each eligible class's mean over window (None: no score)
    previous_window: list[int] = []  # largest_gain: the steps before `window` whose statistics were read
    gains: dict[str, float | None] = {}  # largest_gain: mean over window - mean over previous_window (None: no gain)
    decided_at: float | None = None


@dataclass(frozen=True)
class ClassStats:
    """What the committed scores of one class over some rollouts add up to: how many had a score and its sum;
    how many of the class's active steps' rollouts it was undefined for (rewarded with the weighted total, or
    masked)."""

    count: int = 0
    total: float = 0.0
    fallback: int = 0
    masked: int = 0

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def __add__(self, other: "ClassStats") -> "ClassStats":
        return ClassStats(
            self.count + other.count,
            self.total + other.total,
            self.fallback + other.fallback,
            self.masked + other.masked,
        )


StepStats = Mapping[str, ClassStats]  # per class


def parse_stats(fields: Mapping[bytes, bytes]) -> dict[str, ClassStats]:
    """A step's statistics hash, per class."""
    found: dict[str, dict[str, float]] = {}
    for field, value in fields.items():
        kind, _, meta_class = field.decode().partition(":")
        found.setdefault(meta_class, {})[kind] = float(value)
    return {
        c: ClassStats(
            round(f.get("count", 0)), f.get("sum", 0.0), round(f.get("fallback", 0)), round(f.get("masked", 0))
        )
        for c, f in sorted(found.items())
    }


async def read_history(redis: Redis, keys: Keys, run_id: str) -> dict[int, Decision]:
    """Every decision of the run, by step."""
    return parse_history(cast(dict[bytes, bytes], await redis.hgetall(keys.schedule(run_id))))


def parse_history(fields: dict[bytes, bytes]) -> dict[int, Decision]:
    """The decisions of a run's schedule hash, by step."""
    decisions = {int(step): msgspec.json.decode(raw, type=Decision) for step, raw in fields.items()}
    return dict(sorted(decisions.items()))


async def read_stats(redis: Redis, keys: Keys, run_id: str, steps: Sequence[int]) -> dict[int, dict[str, ClassStats]]:
    """The statistics of each of `steps`, per class."""
    async with redis.pipeline(transaction=False) as pipe:
        for s in steps:
            pipe.hgetall(keys.class_stats(run_id, s))
        found = cast(list[dict[bytes, bytes]], await pipe.execute())
    return {s: parse_stats(fields) for s, fields in zip(steps, found)}


def explain(decision: Decision) -> str:
    """One line: the class and why."""
    chosen = decision.meta_class or "weighted total"
    match decision.reason:
        case "warm_up":
            return f"{chosen}: warm-up"
        case "no_class":
            return f"{chosen}: no eligible meta-class in the rubric set"
        case "phase":
            return f"{chosen}: its phase continues (min_phase_steps)"
        case "round_robin":
            return f"{chosen}: next in order {', '.join(decision.eligible)}"
        case "most_room":
            means = ", ".join(f"{c} {'-' if m is None else f'{m:.3f}'}" for c, m in decision.means.items())
            return f"{chosen}: lowest recent mean over steps {decision.window} ({means})"
        case "largest_gain":
            gains = ", ".join(f"{c} {'-' if g is None else f'{g:+.3f}'}" for c, g in decision.gains.items())
            return f"{chosen}: largest gain, steps {decision.window} over {decision.previous_window} ({gains})"
    return chosen


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
        are eligible whatever the strategy, and for `largest_gain` the window before it."""
        return list(before[-(2 if self.strategy == "largest_gain" else 1) * self.window_steps :])

    def eligible(
        self, declared: Sequence[str], in_rubrics: Sequence[str], before: Sequence[int], stats: Mapping[int, StepStats]
    ) -> list[str]:
        """The declared classes with a positive-point rubric in the deciding rollout's set (`in_rubrics`) or a
        score in the last `window_steps` of `before`, in the declared order."""
        seen = {c for s in before[-self.window_steps :] for c, st in stats.get(s, {}).items() if st.count}
        return [c for c in declared if c in seen or c in in_rubrics]


def choose(
    step: int,
    eligible: Sequence[str],
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
            eligible=list(eligible),
            decided_at=time.time(),
            **more,  # type: ignore[arg-type]
        )

    if len(before) < rule.warmup_steps:
        return decided(None, "warm_up")
    if not eligible:
        return decided(None, "no_class")
    previous = history[before[-1]].meta_class if before else None
    if previous in eligible and phase_length(before, history) < rule.min_phase_steps:
        return decided(previous, "phase")
    if rule.strategy == "round_robin":
        at = eligible.index(previous) + 1 if previous in eligible else 0
        return decided(eligible[at % len(eligible)], "round_robin")
    window = before[-rule.window_steps :]
    means = recent_means(eligible, [stats.get(s, {}) for s in window])
    order = {c: i for i, c in enumerate(eligible)}
    if rule.strategy == "most_room":
        best = min(eligible, key=lambda c: (means[c] is not None, means[c] or 0.0, order[c]))
        return decided(best, "most_room", window=window, means=means)
    earlier = before[-2 * rule.window_steps : -rule.window_steps]
    gains = recent_gains(means, recent_means(eligible, [stats.get(s, {}) for s in earlier]))
    best = min(eligible, key=lambda c: (gains[c] is not None, -(gains[c] or 0.0), order[c]))
    return decided(best, "largest_gain", window=window, means=means, previous_window=earlier, gains=gains)


def rewarded(rubrics: Sequence[Rubric], declared: Sequence[str]) -> list[str]:
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


def recent_means(classes: Sequence[str], steps: Sequence[StepStats]) -> dict[str, float | None]:
    """Each class's mean over every rollout of `steps`."""
    return {c: sum((s.get(c, ClassStats()) for s in steps), ClassStats()).mean for c in classes}


def recent_gains(means: Mapping[str, float | None], earlier: Mapping[str, float | None]) -> dict[str, float | None]:
    """Each class's recent mean minus its earlier one (None where either is undefined)."""
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


class Schedule:
    """The decisions of every run, in Redis (state.decisions: each read or made once per process)."""

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
        self.service = service
        self._decisions = StepDecisions(redis, Decision, keys.schedule, events=keys.events, maxlen=maxlen)

    async def active(self, run_id: str, step: int, rewarded: Sequence[str]) -> Decision:
        """The decision of (run, step): the one in Redis, else one made now (`rewarded`: the classes with a
        positive-point rubric in the deciding rollout's set; Rule.eligible adds those recently scored)."""

        async def make() -> tuple[Decision, Event]:
            history = await self._latest(run_id, step)
            before = sorted(history)
            stats = await read_stats(self.redis, self.keys, run_id, self.rule.read_steps(before))
            eligible = self.rule.eligible(self.declared, rewarded, before, stats)
            decision = choose(step, eligible, history, stats, self.rule)
            return decision, self.event(run_id, decision)

        return await self._decisions.get(run_id, step, make)

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
