"""Rubric health: what a score adds to its step's hash, and what the hash says of each rubric."""

from collections import Counter

import msgspec

from rubricd.messages import JudgeStatus, RubricHealth, RubricResult, Score
from rubricd_services.state.health import health, increments


def score(*met: tuple[str, bool], status: JudgeStatus = JudgeStatus.OK, evaluation: bool = False) -> Score:
    return Score(
        run_id="run",
        rollout_id="r",
        step=3,
        status=status,
        reward=1.0 if status is JudgeStatus.OK else None,
        rubric_version=1,
        results=[RubricResult(rubric_id=r, met=m, points=1) for r, m in met],
        evaluation=evaluation,
    )


def hash_of(*scored: tuple[str | None, Score]) -> Counter[str]:
    """The health hash after these (group, score) commits."""
    counts: Counter[str] = Counter()
    for group, s in scored:
        counts.update(increments(s, group))
    return counts


def test_a_score_adds_a_verdict_per_rubric_and_a_met_one_where_met() -> None:
    assert increments(score(("correct", True), ("pads:long", False)), "g1") == {
        "n:g1:correct": 1,
        "m:g1:correct": 1,
        "n:g1:pads:long": 1,
    }
    assert increments(score(("correct", True)), None) == {"n::correct": 1, "m::correct": 1}


def test_scores_that_do_not_train_add_nothing() -> None:
    assert increments(score(("correct", True), status=JudgeStatus.JUDGE_FAILED), "g") == {}
    assert increments(score(("correct", True), evaluation=True), "g") == {}


def test_a_rubric_met_by_all_of_one_group_and_none_of_another_is_uninformative() -> None:
    fields = hash_of(
        *[("a", score(("correct", True), ("concise", i == 0))) for i in range(4)],
        *[("b", score(("correct", False), ("concise", False))) for _ in range(4)],
    )
    assert health(fields) == [
        RubricHealth(
            rubric_id="concise", met_rate=0.125, rollouts=8, groups=2, groups_with_spread=1, uninformative=False
        ),
        RubricHealth(rubric_id="correct", met_rate=0.5, rollouts=8, groups=2, groups_with_spread=0, uninformative=True),
    ]


def test_rollouts_without_a_group_count_as_one_group_of_the_step() -> None:
    fields = hash_of(
        (None, score(("correct", True))), (None, score(("correct", False))), ("a", score(("correct", True)))
    )
    [h] = health(fields)
    assert (h.rollouts, h.groups, h.groups_with_spread, h.uninformative) == (3, 2, 1, False)


def test_groups_of_one_never_spread_and_a_rubric_added_mid_step_counts_its_own_rollouts() -> None:
    fields = hash_of(("a", score(("correct", True))), ("b", score(("correct", False), ("new:rubric", True))))
    assert [(h.rubric_id, h.rollouts, h.met_rate, h.uninformative) for h in health(fields)] == [
        ("correct", 2, 0.5, True),
        ("new:rubric", 1, 1.0, True),
    ]


def test_no_scores_no_health() -> None:
    assert health({}) == []


def test_votes_that_split_on_a_rubric_are_counted_per_rubric() -> None:
    def voted(correct: float, pads: float) -> Score:
        results = [
            RubricResult(rubric_id="correct", met=True, points=5, agreement=correct),
            RubricResult(rubric_id="pads", met=False, points=-3, agreement=pads),
        ]
        return msgspec.structs.replace(score(), results=results, votes=3)

    fields = hash_of(
        ("g", voted(2 / 3, 1.0)),
        ("g", voted(1.0, 1.0)),
        ("h", voted(1 / 3 + 1 / 3, 1.0)),
        ("h", score(("correct", True))),
    )
    found = {h.rubric_id: (h.voted, h.votes_split) for h in health(fields)}
    assert found == {"correct": (3, 2), "pads": (3, 0)}
