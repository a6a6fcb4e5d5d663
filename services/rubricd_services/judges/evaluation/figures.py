"""Agreement figures of a judge against labels: plain functions of (label, verdict) pairs, no LLM, no server.

"Met" is the positive class. A figure a sample cannot define (kappa when both sides give one answer only,
balanced accuracy with no labels) is None, never a made-up 0 or 1. The definitions: docs/researchers/judges.md.
"""

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Agreement:
    """How a judge's met / not-met verdicts agree with the labels."""

    n: int
    accuracy: float | None
    balanced_accuracy: float | None  # the mean of the recall of met and of not met, over the classes labelled
    macro_f1: float | None  # the mean F1 of met and of not met, over the classes labelled or said
    kappa: float | None  # Cohen's: agreement beyond what the two sides' rates give by chance
    true_met: int = 0
    false_met: int = 0
    true_unmet: int = 0
    false_unmet: int = 0


def agreement(pairs: Sequence[tuple[bool, bool]]) -> Agreement:
    """Agreement of `pairs`: (label, verdict), True for met."""
    tp = sum(1 for label, said in pairs if label and said)
    fn = sum(1 for label, said in pairs if label and not said)
    fp = sum(1 for label, said in pairs if not label and said)
    tn = sum(1 for label, said in pairs if not label and not said)
    n = len(pairs)
    if not n:
        return Agreement(0, None, None, None, None)
    recalls = [hits / (hits + misses) for hits, misses in ((tp, fn), (tn, fp)) if hits + misses]
    f1s = [
        2 * hits / (2 * hits + fa + misses) for hits, fa, misses in ((tp, fp, fn), (tn, fn, fp)) if hits + fa + misses
    ]
    observed = (tp + tn) / n
    chance = ((tp + fn) * (tp + fp) + (tn + fp) * (tn + fn)) / (n * n)
    kappa = None if math.isclose(chance, 1.0) else (observed - chance) / (1 - chance)
    return Agreement(
        n,
        observed,
        statistics.fmean(recalls),
        statistics.fmean(f1s),
        kappa,
        true_met=tp,
        false_met=fp,
        true_unmet=tn,
        false_unmet=fn,
    )


def percentile(values: Sequence[float], q: int) -> float | None:
    """The q-th percentile (inclusive method, as the bench quotes them); None for no values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None
