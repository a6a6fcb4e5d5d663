"""The checks of one proposed rubric, the same for the generator's drafts and the updater's proposals (pure).

Each caller applies them in its own order, with its own rules around them: the updater's anchors and set size
(an empty criterion, the meta-class, then the points), the generator's phrasing, rule kinds, repeats and count
(the phrasing, the points, then the meta-class). The rules: docs/researchers/rubrics.md and docs/researchers/rubric-arm.md.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from rubricd.messages import HEALTHBENCH_AXES

PHRASE = "The response"  # how a generated criterion begins
MAX_CRITERION_CHARS = 300  # a criterion's length, bounded in the answer schemas a model is asked for


@dataclass(frozen=True)
class RubricLimits:
    """The bounds a proposed rubric keeps: its points (never zero) and its meta-class."""

    min_points: float = -10.0
    max_points: float = 10.0
    meta_classes: tuple[str, ...] = HEALTHBENCH_AXES  # the deployment's (settings.meta_classes)


def phrasing_problem(criterion: str) -> str | None:
    """A generated criterion reads "The response ..." (`phrased`)."""
    if not criterion.startswith(PHRASE + " ") or len(criterion) <= len(PHRASE) + 3:
        return f"not phrased {PHRASE!r} + a criterion"
    return None


def points_problem(points: float, limits: RubricLimits) -> str | None:
    if not limits.min_points <= points <= limits.max_points or points == 0:
        return f"points {points:g} outside [{limits.min_points:g}, {limits.max_points:g}] (or zero)"
    return None


def meta_class_problem(meta_class: str, meta_classes: Sequence[str]) -> str | None:
    if meta_class not in meta_classes:
        return f"meta_class {meta_class!r} is not declared {list(meta_classes)}"
    return None


def phrased(criterion: str) -> str:
    """The criterion, its whitespace collapsed, its leading "the response" capitalized."""
    text = " ".join(criterion.split())
    if text.lower().startswith(PHRASE.lower()):
        text = PHRASE + text[len(PHRASE) :]
    return text
