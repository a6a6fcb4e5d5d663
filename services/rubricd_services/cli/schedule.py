"""`rubricd schedule RUN`: alternating rewards, each step's active meta-class, why, and the statistics behind it."""

import argparse
from typing import Any

import msgspec

from rubricd_services.state.schedule import ClassStats, Decision, explain, read_history, read_stats

from .context import Context, Failed, clock, table

HELP = """\
For each decided step of a run (policy `alternating`): its active meta-class
(`-`: none, the reward was the weighted total), why it was chosen (warm_up,
phase, round_robin, most_room, largest_gain, no_class) with the recent means
that chose it (most_room, largest_gain: and their gains), and the step's own
statistics: each class's mean score over the step's committed scores, with
their count, and how many rollouts the active class was undefined for
(rewarded with the weighted total, or masked). The decisions and statistics
are the scorer's (<ns>:schedule:<run>, <ns>:class-stats:<run>:<step>; the
statistics expire RUBRICD_SCHEDULE_STATS_TTL_S after the step's last score).
"""


SUMMARY = "alternating rewards: each step's meta-class, why, and its per-class statistics"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--json", action="store_true", help="one JSON object per step")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        history = await read_history(redis, ctx.keys, args.run_id)
        stats = await read_stats(redis, ctx.keys, args.run_id, list(history))
    if not history:
        raise Failed(f"run {args.run_id!r} has no schedule (its scorers use policy alternating?)")
    if args.json:
        for step, decision in history.items():
            print(msgspec.json.encode(row(decision, stats[step])).decode())
    else:
        print(render(history, stats))
    return 0


def row(decision: Decision, stats: dict[str, ClassStats]) -> dict[str, Any]:
    """One step, as --json prints it: the decision, and the step's statistics per class."""
    return {
        **msgspec.to_builtins(decision),
        "stats": {
            c: {"count": s.count, "mean": s.mean, "fallback": s.fallback, "masked": s.masked} for c, s in stats.items()
        },
    }


def render(history: dict[int, Decision], stats: dict[int, dict[str, ClassStats]]) -> str:
    rows = [
        [
            step,
            d.meta_class or "-",
            d.reason,
            clock(d.decided_at),
            "  ".join(f"{c} {s.mean:.3f} ({s.count})" for c, s in stats[step].items() if s.mean is not None) or "-",
            undefined(stats[step].get(d.meta_class or "")),
            explain(d),
        ]
        for step, d in history.items()
    ]
    return table(rows, ["step", "class", "reason", "decided", "step's means (count)", "undefined", "why"])


def undefined(active: ClassStats | None) -> str:
    """The rollouts the step's active class had no score for: `N fallback` (weighted total) or `N masked`."""
    if active is None or not (active.fallback or active.masked):
        return "-"
    return ", ".join(f"{n} {what}" for n, what in ((active.fallback, "fallback"), (active.masked, "masked")) if n)
