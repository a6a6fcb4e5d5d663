"""The eval's picture: each judge configuration's agreement against what a call costs it (matplotlib, Agg)."""

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .pairs import PairReport
from .run import Report


def agreement_vs_cost(reports: Sequence[Report] | Sequence[PairReport], path: Path) -> None:
    """One point per configuration: balanced accuracy against cost per call (by RUBRICD_PRICES), or against
    tokens per call where a model has no price."""
    priced = all(r.cost is not None for r in reports)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in reports:
        calls = max(1, r.items)
        x = (r.cost or 0.0) / calls if priced else (r.prompt_tokens_per_call or 0) + (r.completion_tokens_per_call or 0)
        y = r.overall.balanced_accuracy
        if y is None:
            continue
        ax.scatter([x], [y], s=50)
        ax.annotate(f"{r.name} ({r.model})", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel("cost per call" if priced else "tokens per call (no price for every model)")
    ax.set_ylabel("balanced accuracy against the labels")
    ax.set_ylim(0, 1.05)
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)  # a judge that always says one answer
    ax.set_title("judge agreement against cost")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
