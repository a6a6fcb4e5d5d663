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

from .compare import classes as class_names
from .trainer import Run

COLOURS = {
    "correct": "tab:green",
    "wrong": "tab:red",
    "padded": "tab:orange",
    "sycophantic": "tab:purple",
    "judge_addressing": "tab:gray",
    "terse": "tab:brown",
    "honest": "tab:green",  # the agent's
    "fabricated": "tab:red",
}
CLASS_COLOURS = {
    "accuracy": "tab:blue",
    "completeness": "tab:orange",
    "communication_quality": "tab:green",
    "context_awareness": "tab:purple",
    "instruction_following": "tab:red",
}


def update_markers(run: Run) -> list[tuple[int, float]]:
    """(version, x) of each rubric update: drawn between the step it was made from and the next."""
    return [(v.version, v.step + 0.5) for v in run.history if v.step is not None]


def rewards(run: Run, path: Path) -> dict:
    """Mean reward per behaviour per step (top) and the behaviour mix (bottom), rubric updates marked."""
    behaviours = run.task.behaviours
    steps = [r.step for r in run.records]
    series = {b: [r.mean_reward.get(b) for r in run.records] for b in behaviours}
    mix = {b: [r.counts[b] / max(1, sum(r.counts.values())) for r in run.records] for b in behaviours}
    markers = update_markers(run)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=(3, 2))
    for b in behaviours:
        ys = [math.nan if y is None else y for y in series[b]]
        top.plot(steps, ys, marker="o", color=COLOURS[b], label=b)
    bottom.stackplot(
        steps, *[mix[b] for b in behaviours], colors=[COLOURS[b] for b in behaviours], alpha=0.8, labels=behaviours
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
    """Rubric set size (anchors, adaptive, and the adaptive turn rubrics apart where there are any) and total
    positive / negative points, per version."""
    versions = [v.version for v in run.history]
    anchors = [sum(r.kind == "anchor" for r in v.rubrics) for v in run.history]
    turn = [sum(r.kind != "anchor" and r.scope == "turn" for r in v.rubrics) for v in run.history]
    adaptive = [len(v.rubrics) - a - t for v, a, t in zip(run.history, anchors, turn)]
    positive = [sum(r.points for r in v.rubrics if r.points > 0) for v in run.history]
    negative = [sum(r.points for r in v.rubrics if r.points < 0) for v in run.history]
    labels = [f"v{v.version}\n" + ("seed" if v.step is None else f"step {v.step}") for v in run.history]
    fig, (size, points) = plt.subplots(1, 2, figsize=(10, 4))
    size.bar(labels, anchors, color="tab:blue", label="anchor")
    size.bar(labels, adaptive, bottom=anchors, color="tab:cyan", label="adaptive")
    if any(turn):
        below = [a + b for a, b in zip(anchors, adaptive)]
        size.bar(labels, turn, bottom=below, color="tab:purple", label="adaptive, judged per turn")
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
        "size": [a + b + t for a, b, t in zip(anchors, adaptive, turn)],
        "turn": turn,
        "positive": positive,
        "negative": negative,
    }
    _save(fig, path, data)
    return data


def classes(run: Run, path: Path) -> dict:
    """Mean score per meta-class per step (solid), the compared run's (dashed), the active class shaded."""
    names = class_names(run)
    steps = [r.step for r in run.records]
    series = {c: [r.class_means.get(c) for r in run.records] for c in names}
    twin = run.compared_with
    twin_series = {c: [r.class_means.get(c) for r in twin.records] for c in names} if twin else {}
    fig, ax = plt.subplots(figsize=(9, 5))
    colour = lambda c: CLASS_COLOURS.get(c, "tab:gray")  # noqa: E731
    for r in run.records:
        if r.active_meta_class in names:
            ax.axvspan(r.step - 0.5, r.step + 0.5, color=colour(r.active_meta_class), alpha=0.12, linewidth=0)
    for c in names:
        ax.plot(steps, [math.nan if y is None else y for y in series[c]], marker="o", color=colour(c), label=c)
        if twin:
            ys = [math.nan if y is None else y for y in twin_series[c]]
            ax.plot(
                [r.step for r in twin.records], ys, linestyle="--", color=colour(c), label=f"{c} ({twin.reward_policy})"
            )
    ax.axhline(run.target, color="black", linewidth=0.5, linestyle=":")
    ax.set(
        xlabel="training step",
        ylabel="mean class score",
        ylim=(-0.05, 1.05),
        title=f"{run.run_id}: per-class means ({run.reward_policy}, solid; shaded: the active class)",
    )
    ax.set_xticks(steps)
    ax.legend(loc="lower right", fontsize="small")
    data = {
        "run_id": run.run_id,
        "reward_policy": run.reward_policy,
        "steps": steps,
        "active": [r.active_meta_class for r in run.records],
        "class_means": series,
        "target": run.target,
        "compared_with": {"run_id": twin.run_id, "reward_policy": twin.reward_policy, "class_means": twin_series}
        if twin
        else None,
    }
    _save(fig, path, data)
    return data


def _save(fig: plt.Figure, path: Path, data: dict) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": "rubricd demo", "rubricd": json.dumps(data)})
    plt.close(fig)
