"""The meta-class schedule's rule, from given decisions and statistics, without Redis."""

import pytest

from rubricd.messages import HEALTHBENCH_AXES, JudgeStatus, Rubric, Score
from rubricd_services.state.schedule import (
    ClassStats,
    Decision,
    Rule,
    choose,
    explain,
    parse_stats,
    rewarded,
    stats_increments,
)

AXES = ["accuracy", "completeness", "communication_quality"]


def history(*classes: str | None) -> dict[int, Decision]:
    """Decisions of steps 0, 1, ... choosing `classes` in turn."""
    return {
        s: Decision(step=s, meta_class=c, reason="warm_up" if c is None else "round_robin", strategy="round_robin")
        for s, c in enumerate(classes)
    }


def run(rule: Rule, steps: int, stats: dict[int, dict[str, ClassStats]] | None = None) -> list[str | None]:
    """The classes a run of `steps` steps gets, each step decided after the previous one."""
    decided: dict[int, Decision] = {}
    for s in range(steps):
        decided[s] = choose(s, AXES, decided, stats or {}, rule)
    return [decided[s].meta_class for s in range(steps)]


def test_round_robin_goes_through_the_declared_classes_in_order():
    assert run(Rule(), 7) == [*AXES, *AXES, "accuracy"]


def test_warm_up_steps_give_the_weighted_total_first():
    classes = run(Rule(warmup_steps=2), 5)
    assert classes == [None, None, "accuracy", "completeness", "communication_quality"]
    assert choose(1, AXES, history(None), {}, Rule(warmup_steps=2)).reason == "warm_up"


def test_a_class_stays_active_for_the_minimum_phase():
    assert run(Rule(min_phase_steps=2), 7) == [
        "accuracy",
        "accuracy",
        "completeness",
        "completeness",
        "communication_quality",
        "communication_quality",
        "accuracy",
    ]
    kept = choose(3, AXES, history(None, "accuracy", "completeness"), {}, Rule(min_phase_steps=3))
    assert (kept.meta_class, kept.reason) == ("completeness", "phase")


def test_the_schedule_follows_the_decided_steps_not_the_step_numbers():
    decided = {10: history("accuracy")[0], 20: history("completeness")[0]}
    assert choose(25, AXES, decided, {}, Rule()).meta_class == "communication_quality"
    assert choose(15, AXES, decided, {}, Rule()).meta_class == "completeness"  # a late step: what preceded it


def test_a_class_no_longer_eligible_restarts_the_order():
    assert choose(1, ["completeness", "accuracy"], history("safety"), {}, Rule(min_phase_steps=5)).meta_class == (
        "completeness"
    )


def test_most_room_picks_the_lowest_recent_mean():
    stats = {
        0: {
            "accuracy": ClassStats(4, 3.6),
            "completeness": ClassStats(4, 2.0),
            "communication_quality": ClassStats(4, 3.0),
        },
        1: {
            "accuracy": ClassStats(4, 3.2),
            "completeness": ClassStats(4, 3.6),
            "communication_quality": ClassStats(2, 0.8),
        },
    }
    decision = choose(2, AXES, history(None, None), stats, Rule(strategy="most_room"))
    # accuracy 6.8/8, completeness 5.6/8 = 0.7, communication_quality 3.8/6 = 0.633
    assert (decision.meta_class, decision.reason) == ("communication_quality", "most_room")
    assert decision.window == [0, 1]
    assert decision.means == pytest.approx({"accuracy": 0.85, "completeness": 0.7, "communication_quality": 3.8 / 6})


def test_most_room_reads_only_the_window_and_tries_an_unseen_class_first():
    stats = {
        0: {"accuracy": ClassStats(10, 0.0)},  # outside a window of 1
        1: {"accuracy": ClassStats(2, 1.8), "completeness": ClassStats(2, 1.0)},
    }
    rule = Rule(strategy="most_room", window_steps=1)
    assert choose(2, ["accuracy", "completeness"], history(None, None), stats, rule).meta_class == "completeness"
    unseen = choose(2, AXES, history(None, None), stats, rule)
    assert unseen.meta_class == "communication_quality" and unseen.means["communication_quality"] is None


def test_most_room_breaks_ties_by_the_declared_order_and_respects_the_phase():
    even = {0: {c: ClassStats(2, 1.0) for c in AXES}}
    assert choose(1, AXES, history(None), even, Rule(strategy="most_room")).meta_class == "accuracy"
    rule = Rule(strategy="most_room", min_phase_steps=2)
    assert choose(2, AXES, history(None, "completeness"), even, rule).meta_class == "completeness"


def test_largest_gain_picks_the_class_whose_recent_mean_rose_most():
    stats = {
        0: {
            "accuracy": ClassStats(4, 2.0),
            "completeness": ClassStats(4, 3.6),
            "communication_quality": ClassStats(4, 2.0),
        },
        1: {
            "accuracy": ClassStats(4, 2.4),
            "completeness": ClassStats(4, 3.6),
            "communication_quality": ClassStats(4, 1.2),
        },
        2: {
            "accuracy": ClassStats(4, 3.2),
            "completeness": ClassStats(4, 3.6),
            "communication_quality": ClassStats(4, 0.8),
        },
        3: {
            "accuracy": ClassStats(4, 2.8),
            "completeness": ClassStats(4, 3.8),
            "communication_quality": ClassStats(4, 1.6),
        },
    }
    rule = Rule(strategy="largest_gain", window_steps=2)
    decision = choose(4, AXES, history(None, None, None, None), stats, rule)
    # recent [2, 3] minus earlier [0, 1]: accuracy 0.75 - 0.55, completeness 0.925 - 0.9, communication 0.3 - 0.4
    assert (decision.meta_class, decision.reason, decision.strategy) == ("accuracy", "largest_gain", "largest_gain")
    assert (decision.window, decision.previous_window) == ([2, 3], [0, 1])
    assert decision.means == pytest.approx({"accuracy": 0.75, "completeness": 0.925, "communication_quality": 0.3})
    assert decision.gains == pytest.approx({"accuracy": 0.2, "completeness": 0.025, "communication_quality": -0.1})
    assert "largest gain" in explain(decision) and "accuracy +0.200" in explain(decision)


def test_largest_gain_favours_the_rising_class_not_the_weakest_or_the_falling_one():
    stats = {
        0: {
            "accuracy": ClassStats(2, 0.2),
            "completeness": ClassStats(2, 1.8),
            "communication_quality": ClassStats(2, 1.0),
        },
        1: {
            "accuracy": ClassStats(2, 0.2),
            "completeness": ClassStats(2, 1.2),
            "communication_quality": ClassStats(2, 1.4),
        },
    }
    rule = Rule(strategy="largest_gain", window_steps=1)
    # accuracy is the weakest (most_room's pick), completeness fell most; communication_quality rose
    assert choose(2, AXES, history(None, None), stats, Rule(strategy="most_room", window_steps=1)).meta_class == (
        "accuracy"
    )
    assert choose(2, AXES, history(None, None), stats, rule).meta_class == "communication_quality"
    # every class fell: the smallest fall wins (a negative gain is still compared)
    falling = {
        0: {c: ClassStats(2, 2.0) for c in AXES},
        1: {"accuracy": ClassStats(2, 0.5)} | {c: ClassStats(2, 1.5) for c in AXES[1:]},
    }
    assert choose(2, AXES, history(None, None), falling, rule).meta_class == "completeness"  # tie: declared order


def test_largest_gain_tries_a_class_without_a_gain_first_and_reads_only_its_two_windows():
    stats = {
        0: {"accuracy": ClassStats(2, 2.0), "completeness": ClassStats(2, 2.0)},  # outside two windows of 1
        1: {"accuracy": ClassStats(2, 0.0), "completeness": ClassStats(2, 1.0)},
        2: {
            "accuracy": ClassStats(2, 2.0),
            "completeness": ClassStats(2, 1.0),
            "communication_quality": ClassStats(1, 0.0),
        },
    }
    rule = Rule(strategy="largest_gain", window_steps=1)
    decided = choose(3, ["accuracy", "completeness"], history(None, None, None), stats, rule)
    assert (decided.meta_class, decided.window, decided.previous_window) == ("accuracy", [2], [1])
    # communication_quality has a score in the recent window only: no gain, so it goes first
    unseen = choose(3, AXES, history(None, None, None), stats, rule)
    assert unseen.meta_class == "communication_quality" and unseen.gains["communication_quality"] is None
    assert rule.read_steps([0, 1, 2]) == [1, 2] and Rule(window_steps=1).read_steps([0, 1, 2]) == [2]


def test_largest_gain_without_two_windows_takes_the_first_class_and_respects_the_phase():
    rule = Rule(strategy="largest_gain", window_steps=2)
    early = choose(2, AXES, history(None, None), {0: {c: ClassStats(1, 0.5) for c in AXES}}, rule)
    assert (early.meta_class, early.previous_window, early.gains) == ("accuracy", [], dict.fromkeys(AXES))
    stats = {0: {c: ClassStats(1, 0.0) for c in AXES}, 1: {c: ClassStats(1, 1.0) for c in AXES}}
    kept = choose(2, AXES, history(None, "completeness"), stats, Rule(strategy="largest_gain", min_phase_steps=2))
    assert (kept.meta_class, kept.reason) == ("completeness", "phase")


def test_no_eligible_class_means_no_active_class():
    decision = choose(0, [], {}, {}, Rule())
    assert decision.meta_class is None and decision.reason == "no_class"


def scored(meta_class_scores: dict[str, float], *, active: str | None = None, **more: object) -> Score:
    return Score(
        run_id="r",
        rollout_id="x",
        step=0,
        status=more.pop("status", JudgeStatus.OK),  # type: ignore[arg-type]
        reward=0.0,
        rubric_version=1,
        meta_class_scores=meta_class_scores,
        policy=more.pop("policy", "alternating"),  # type: ignore[arg-type]
        active_meta_class=active,
        **more,  # type: ignore[arg-type]
    )


def test_statistics_round_trip_through_their_hash_fields():
    fields: dict[str, float] = {}
    for score in (
        scored({"accuracy": 1.0, "completeness": 0.5}, active="accuracy"),
        scored({"accuracy": 0.5}, active="completeness", undefined_meta_classes=["completeness"]),
        scored({}, active="completeness", undefined_meta_classes=["completeness"], masked=True),
    ):
        for field, value in stats_increments(score).items():
            fields[field] = fields.get(field, 0) + value
    parsed = parse_stats({k.encode(): str(v).encode() for k, v in fields.items()})
    assert parsed == {"accuracy": ClassStats(2, 1.5), "completeness": ClassStats(1, 0.5, fallback=1, masked=1)}
    assert parsed["accuracy"].mean == 0.75


def test_only_an_ok_score_under_alternating_adds_to_the_statistics():
    assert stats_increments(scored({"accuracy": 1.0}, policy="weighted_sum")) == {}
    assert stats_increments(scored({"accuracy": 1.0}, status=JudgeStatus.JUDGE_FAILED)) == {}
    assert stats_increments(scored({"accuracy": 1.0})) == {"count:accuracy": 1, "sum:accuracy": 1.0}


def test_the_eligible_classes_add_the_classes_the_runs_recent_rollouts_were_scored_on():
    stats = {
        0: {"context_awareness": ClassStats(1, 1.0)},  # outside the window of 2
        1: {"completeness": ClassStats(1, 0.5), "accuracy": ClassStats(0, 0.0, fallback=3)},  # a fallback: no score
        2: {"communication_quality": ClassStats(2, 1.0)},
    }
    rule = Rule(window_steps=2)
    # whichever prompt's rollout decides, the step gets the classes of the run's recent rollouts too
    assert rule.eligible(HEALTHBENCH_AXES, ["instruction_following"], [0, 1, 2], stats) == [
        "completeness",
        "communication_quality",
        "instruction_following",
    ]
    assert rule.eligible(HEALTHBENCH_AXES, ["accuracy"], [], {}) == ["accuracy"]
    assert rule.eligible(["completeness"], ["accuracy"], [0, 1, 2], stats) == ["completeness"]  # declared only


def test_the_rewarded_classes_are_the_declared_ones_with_a_positive_rubric_in_declared_order():
    rubrics = [
        Rubric(id="a", criterion="a", points=-5, meta_class="accuracy"),
        Rubric(id="b", criterion="b", points=2, meta_class="instruction_following"),
        Rubric(id="c", criterion="c", points=1, meta_class="completeness"),
        Rubric(id="d", criterion="d", points=-1, meta_class="completeness"),
    ]
    assert rewarded(rubrics, HEALTHBENCH_AXES) == ["completeness", "instruction_following"]
    assert rewarded(rubrics, ["instruction_following", "completeness"]) == ["instruction_following", "completeness"]
    assert rewarded(rubrics, ["accuracy"]) == []


@pytest.mark.parametrize(
    "rule",
    [
        Rule(),
        Rule(warmup_steps=5, min_phase_steps=4),
        Rule(strategy="most_room", min_phase_steps=2, window_steps=3),
        Rule(strategy="largest_gain", warmup_steps=2, min_phase_steps=3, window_steps=4),
    ],
)
def test_a_decision_needs_only_the_runs_latest_decisions_not_its_whole_history(rule):
    """The scorer reads the last `decisions_read()` decisions of a long run, never its whole schedule: every step of
    a 60-step run is decided the same from those as from the whole history."""
    stats = {
        s: {c: ClassStats(count=2, total=(s * 7 + i * 3) % 10 / 10) for i, c in enumerate(AXES)} for s in range(60)
    }
    decided: dict[int, Decision] = {}
    for s in range(60):
        whole = choose(s, AXES, decided, stats, rule)
        latest = {k: decided[k] for k in sorted(decided)[-rule.decisions_read() :]}
        assert choose(s, AXES, latest, stats, rule).meta_class == whole.meta_class, s
        decided[s] = whole
