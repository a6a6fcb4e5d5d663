"""A verdict decided by votes: k judge calls of the same rollout (or group), each in another order, and the
majority per rubric.

The others can only overturn the first vote by a strict majority (a tie keeps the first vote's verdict); for a
rollout judged alone, the first vote is the call a single judge would make. Each rubric's agreement is the share of the votes that gave its verdict. When votes
pay: docs/researchers/groups.md, "Votes".
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .verdicts import Decided


@dataclass(frozen=True)
class Voted:
    """The majority's verdict of each rubric, and the share of the votes that gave it."""

    decided: dict[str, Decided]
    agreement: dict[str, float]

    def mean_agreement(self, ids: Sequence[str]) -> float:
        """The mean agreement over the rubrics `ids` (those in force, not a candidate's in shadow)."""
        return sum(self.agreement[i] for i in ids) / len(ids) if ids else 1.0


def majority(votes: Sequence[Mapping[str, Decided]]) -> Voted:
    """Each rubric's verdict by majority over `votes` (every vote deciding every rubric); the verdict carries the
    explanation and turns of the first vote that gave it."""
    first = votes[0]
    decided, agreement = {}, {}
    for rubric_id in first:
        met = [vote[rubric_id].met for vote in votes]
        ayes = sum(met)
        verdict = first[rubric_id].met if 2 * ayes == len(met) else 2 * ayes > len(met)
        decided[rubric_id] = next(vote[rubric_id] for vote in votes if vote[rubric_id].met == verdict)
        agreement[rubric_id] = met.count(verdict) / len(met)
    return Voted(decided, agreement)
