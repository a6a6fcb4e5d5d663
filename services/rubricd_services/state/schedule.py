"""The meta-class schedule of alternating rewards, as Redis holds it: each step's decision and class statistics.

The read side of what the scorers write (`Keys.schedule`: one `Decision` per run and step; `Keys.class_stats`:
a step's per-class counts and sums): the types, how to read and parse them, and `explain`, one line saying why
a step has its class (`rubricd schedule`, the dashboard, the demo's report). The deciding side is
`rubricd_services.scorer.schedule`. The rule: docs/researchers/alternating.md, "The meta-class schedule".
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys

Strategy = Literal["round_robin", "most_room", "largest_gain"]
Reason = Literal["warm_up", "phase", "round_robin", "most_room", "largest_gain", "no_class"]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The active meta-class of one step of a run, and what chose it."""

    step: int
    meta_class: str | None  # None: no active class, the reward is the weighted total
    reason: Reason
    strategy: Strategy
    candidates: list[str] = []
    window: list[int] = []  # most_room, largest_gain: the recent steps whose statistics were read
    means: dict[str, float | None] = {}  # most_room, largest_gain: each candidate's mean over window (None: no score)
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
            return f"{chosen}: no candidate meta-class in the rubric set"
        case "phase":
            return f"{chosen}: its phase continues (min_phase_steps)"
        case "round_robin":
            return f"{chosen}: next in order {', '.join(decision.candidates)}"
        case "most_room":
            means = ", ".join(f"{c} {'-' if m is None else f'{m:.3f}'}" for c, m in decision.means.items())
            return f"{chosen}: lowest recent mean over steps {decision.window} ({means})"
        case "largest_gain":
            gains = ", ".join(f"{c} {'-' if g is None else f'{g:+.3f}'}" for c, g in decision.gains.items())
            return f"{chosen}: largest gain, steps {decision.window} over {decision.previous_window} ({gains})"
    return chosen
