"""`rubricd accuracy RUN`: the pairwise judge's accuracy on a run's labelled comparisons, per rubric version."""

import argparse
from typing import Any

import msgspec

from rubricd_services.state.accuracy import Accuracy, RunAccuracy, parse_accuracy

from .context import Context, Failed, table

HELP = """\
For each rubric set version a run's comparisons were judged under (pairwise
judging; per-instance sets of the same version counted together): the
comparisons judged and failed, those with a preference label, how many of
those the judge got right and the accuracy (correct / labelled; an
inconsistent preference of a labelled comparison counts as wrong, a failed
judge not at all), the position-consistency rate (the same winner in both
orders / judged in both orders), ties, and the accuracy by meta-class of the
deciding (gatekeeper) rubric (`none`: no gatekeeper: ties and inconsistent
preferences). The counts are the scorer's, added with each committed
Preference (<ns>:accuracy:<run>).
"""


SUMMARY = "pairwise judge accuracy of a run per rubric version: overall, by meta-class, position consistency"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--json", action="store_true", help="one JSON object: per version and the run's total")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        fields = await redis.hgetall(ctx.keys.accuracy(args.run_id))
    accuracy = parse_accuracy(fields)
    if not accuracy.versions:
        raise Failed(f"run {args.run_id!r} has no judged comparisons")
    if args.json:
        print(msgspec.json.encode(as_json(args.run_id, accuracy)).decode())
    else:
        print(render(accuracy))
    return 0


def as_json(run_id: str, accuracy: RunAccuracy) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "versions": {str(v): a.as_dict() for v, a in accuracy.versions.items()},
        "total": accuracy.total.as_dict(),
    }


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _row(name: str, a: Accuracy) -> list[object]:
    classes = "  ".join(f"{c} {_share(x)} ({a.classes[c][1]}/{a.classes[c][0]})" for c, x in a.class_accuracy().items())
    return [
        name,
        a.judged,
        a.failed,
        a.labelled,
        a.correct,
        _share(a.accuracy),
        _share(a.consistency),
        a.ties,
        classes or "-",
    ]


def render(accuracy: RunAccuracy) -> str:
    rows = [_row(f"v{v}", a) for v, a in accuracy.versions.items()]
    if len(rows) > 1:
        rows.append(_row("all", accuracy.total))
    header = ["version", "judged", "failed", "labelled", "correct", "accuracy", "consistency", "ties", "by meta-class"]
    return table(rows, header)
