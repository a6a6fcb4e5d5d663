"""The pairwise judge's accuracy: the counts each committed Preference adds, and reading them back.

Counts per rubric set version, per gatekeeper meta-class and per rubric set, in one hash per run
(`Keys.accuracy`), added by the preference commit script with a comparison's first Preference only.
What counts as correct, and the figures: docs/researchers/rubric-arm.md, "Accuracy".
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rubricd.keys import GLOBAL
from rubricd.messages import JudgeStatus, Preference

NO_CLASS = "none"  # the bucket of preferences without a gatekeeper
COUNTS = ("judged", "failed", "labelled", "correct", "both_orders", "consistent", "ties")


def accuracy_increments(preference: Preference) -> dict[str, int]:
    """The accuracy hash fields (Keys.accuracy) one committed Preference adds to (HINCRBY): per version, per
    gatekeeper meta-class within it, and per rubric set (instance and version)."""
    p = preference
    if p.status is JudgeStatus.REJECTED:
        return {}
    counts = {"failed": 1} if p.status is JudgeStatus.JUDGE_FAILED else {"judged": 1}
    if p.status is JudgeStatus.OK:
        if p.consistent is not None:
            counts["both_orders"] = 1
            counts["consistent"] = int(p.consistent)
        if p.winner == "tie":
            counts["ties"] = 1
        if p.label is not None:
            counts["labelled"] = 1
            counts["correct"] = int(bool(p.correct))
    version = f"v{p.rubric_version}"
    out = {f"{version}:{k}": n for k, n in counts.items()}
    out |= {f"set:{p.instance_key or GLOBAL}:{p.rubric_version}:{k}": n for k, n in counts.items()}
    if "labelled" in counts:
        klass = p.meta_class or NO_CLASS
        out[f"{version}:class:{klass}:labelled"] = 1
        out[f"{version}:class:{klass}:correct"] = counts["correct"]
    return out


@dataclass
class Accuracy:
    """Judge accuracy counts of one group of preferences (a rubric version, a rubric set, or a whole run)."""

    judged: int = 0
    failed: int = 0
    labelled: int = 0
    correct: int = 0
    both_orders: int = 0
    consistent: int = 0
    ties: int = 0
    classes: dict[str, tuple[int, int]] = field(default_factory=dict)  # meta-class -> (labelled, correct)

    @property
    def accuracy(self) -> float | None:
        """correct / labelled; None without a labelled comparison."""
        return self.correct / self.labelled if self.labelled else None

    @property
    def consistency(self) -> float | None:
        """Position-consistency rate: consistent / judged in both orders; None when none was."""
        return self.consistent / self.both_orders if self.both_orders else None

    def class_accuracy(self) -> dict[str, float | None]:
        return {c: (right / n if n else None) for c, (n, right) in sorted(self.classes.items())}

    def add(self, other: "Accuracy") -> None:
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for c, (n, right) in other.classes.items():
            mine = self.classes.get(c, (0, 0))
            self.classes[c] = (mine[0] + n, mine[1] + right)

    def as_dict(self) -> dict[str, Any]:
        return {
            **{name: getattr(self, name) for name in COUNTS},
            "accuracy": self.accuracy,
            "consistency": self.consistency,
            "by_meta_class": {
                c: {"labelled": n, "correct": right, "accuracy": right / n if n else None}
                for c, (n, right) in sorted(self.classes.items())
            },
        }


@dataclass
class RunAccuracy:
    """A run's accuracy hash, read: per rubric version, and per rubric set ((instance key or None, version))."""

    versions: dict[int, Accuracy] = field(default_factory=dict)
    sets: dict[tuple[str | None, int], Accuracy] = field(default_factory=dict)

    @property
    def total(self) -> Accuracy:
        out = Accuracy()
        for a in self.versions.values():
            out.add(a)
        return out


def parse_accuracy(fields: Mapping[bytes | str, bytes | str]) -> RunAccuracy:
    """The accuracy hash (HGETALL) as counts; fields it does not know are skipped."""
    run = RunAccuracy()
    for raw_name, raw_value in fields.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
        n = int(raw_value)
        parts = name.split(":")
        try:
            if parts[0] == "set" and len(parts) == 4 and parts[3] in COUNTS:
                instance = None if parts[1] == GLOBAL else parts[1]
                target = run.sets.setdefault((instance, int(parts[2])), Accuracy())
                setattr(target, parts[3], n)
            elif parts[0].startswith("v") and len(parts) == 2 and parts[1] in COUNTS:
                setattr(run.versions.setdefault(int(parts[0][1:]), Accuracy()), parts[1], n)
            elif parts[0].startswith("v") and len(parts) == 4 and parts[1] == "class":
                version = run.versions.setdefault(int(parts[0][1:]), Accuracy())
                labelled, right = version.classes.get(parts[2], (0, 0))
                version.classes[parts[2]] = (n, right) if parts[3] == "labelled" else (labelled, n)
        except ValueError:
            continue
    run.versions = dict(sorted(run.versions.items()))
    return run
