"""The report's plots (matplotlib, Agg backend: no display needed).

Each PNG also carries the data it draws as JSON in its `rubricd` text chunk,
so a reader (or a test) can check a plot against the run without reading
pixels.
"""

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .policy import BEHAVIOURS
from .trainer import Run

COLOURS = {
    "correct": "tab:green",
    "wrong": "tab:red",
    "padded": "tab:orange",
    "sycophantic": "tab:purple",
    "judge_addressing": "tab:gray",
}


def update_markers(run: Run) -> list[tuple[int, float]]:
    """(version, x) of each rubric update: drawn between the step it was made from and the next."""
    return [(v.version, v.step + 0.5) for v in run.history if v.step is not None]


def rewards(run: Run, path: Path) -> dict:
    """Mean reward per behaviour per step (top) and the behaviour mix (bottom), rubric updates marked."""
    steps = [r.step for r in run.records]
    series = {b: [r.mean_reward.get(b) for r in run.records] for b in BEHAVIOURS}
    mix = {b: [r.counts[b] / max(1, sum(r.counts.values())) for r in run.records] for b in BEHAVIOURS}
    markers = update_markers(run)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=(3, 2))
    for b in BEHAVIOURS:
        ys = [math.nan if y is None else y for y in series[b]]
        top.plot(steps, ys, marker="o", color=COLOURS[b], label=b)
    bottom.stackplot(
        steps, *[mix[b] for b in BEHAVIOURS], colors=[COLOURS[b] for b in BEHAVIOURS], alpha=0.8, labels=BEHAVIOURS
    )
    for version, x in markers:
        for ax in (top, bottom):
            ax.axvline(x, color="black", linestyle="--", linewidth=1)
        top.annotate(
            f"v{version}", (x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12), textcoords="offset points"
        )
    top.set(
        ylabel="mean reward",
        ylim=(-0.05, 1.05),
        title=f"{run.run_id}: mean reward per behaviour (dashed: rubric update -> version)",
    )
    top.legend(loc="lower right", fontsize="small")
    bottom.set(xlabel="training step", ylabel="share of the batch", ylim=(0, 1))
    bottom.set_xticks(steps)
    if steps:
        bottom.set_xlim(-0.3, max([steps[-1], *(x for _, x in markers)]) + 0.3)
    data = {"run_id": run.run_id, "steps": steps, "mean_reward": series, "markers": [v for v, _ in markers]}
    _save(fig, path, data)
    return data


def rubrics(run: Run, path: Path) -> dict:
    """Rubric set size (anchors and adaptive) and total positive / negative points, per version."""
    versions = [v.version for v in run.history]
    anchors = [sum(r.kind == "anchor" for r in v.rubrics) for v in run.history]
    adaptive = [len(v.rubrics) - a for v, a in zip(run.history, anchors)]
    positive = [sum(r.points for r in v.rubrics if r.points > 0) for v in run.history]
    negative = [sum(r.points for r in v.rubrics if r.points < 0) for v in run.history]
    labels = [f"v{v.version}\n" + ("seed" if v.step is None else f"step {v.step}") for v in run.history]
    fig, (size, points) = plt.subplots(1, 2, figsize=(10, 4))
    size.bar(labels, anchors, color="tab:blue", label="anchor")
    size.bar(labels, adaptive, bottom=anchors, color="tab:cyan", label="adaptive")
    size.set(ylabel="rubrics in the set", title="rubric set size")
    size.legend(fontsize="small")
    points.plot(labels, positive, marker="o", color="tab:green", label="total positive points")
    points.plot(labels, negative, marker="o", color="tab:red", label="total negative points")
    points.axhline(0, color="black", linewidth=0.5)
    points.set(ylabel="points", title="points over versions")
    points.legend(fontsize="small")
    fig.suptitle(f"{run.run_id}: rubric versions (the label says which step's evidence made each)")
    data = {
        "run_id": run.run_id,
        "versions": versions,
        "size": [a + b for a, b in zip(anchors, adaptive)],
        "positive": positive,
        "negative": negative,
    }
    _save(fig, path, data)
    return data


def _save(fig: plt.Figure, path: Path, data: dict) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": "rubricd demo", "rubricd": json.dumps(data)})
    plt.close(fig)
