"""The reward policies: HealthBench's rule, per meta-class too, and the alternating policy."""

import pytest

from rubricd.messages import Rubric
from rubricd_services.rubrics.policies import alternating, healthbench_score, meta_class_scores, policy, weighted_sum
from tests.factories import rubric

# Points 5, 3 and -4; of accuracy, completeness and communication.
RUBRICS = [
    rubric(),
    rubric("shows_reasoning", id="steps", points=3),
    rubric("pads", points=-4, meta_class="communication"),
]

# Shaped as a HealthBench example's rubrics: each criterion's `axis:` tag is its meta-class, points in -10..10.
HEALTHBENCH = [
    Rubric(id="c1", criterion="Advises seeking emergency care for chest pain", points=10, meta_class="accuracy"),
    Rubric(id="c2", criterion="States a wrong dosage of aspirin", points=-8, meta_class="accuracy"),
    Rubric(id="c3", criterion="Asks about the duration of the symptoms", points=5, meta_class="context_awareness"),
    Rubric(id="c4", criterion="Mentions calling the local emergency number", points=6, meta_class="completeness"),
    Rubric(id="c5", criterion="Mentions the risk factors of a heart attack", points=4, meta_class="completeness"),
    Rubric(id="c6", criterion="Uses jargon a lay reader cannot follow", points=-3, meta_class="communication_quality"),
]


def test_met_points_over_positive_points():
    assert weighted_sum(RUBRICS, {"correct": True}).total == pytest.approx(5 / 8)
    assert weighted_sum(RUBRICS, {"correct": True, "steps": True}).total == 1.0


def test_negative_rubrics_subtract_and_reward_is_clipped():
    assert weighted_sum(RUBRICS, {"correct": True, "pads": True}).total == pytest.approx(1 / 8)
    assert weighted_sum(RUBRICS, {"pads": True}).total == 0.0
    assert weighted_sum(RUBRICS, {}).total == 0.0


def test_meta_class_scores_apply_the_rule_per_class_and_a_class_without_positive_points_is_undefined():
    reward = weighted_sum(RUBRICS, {"correct": True, "pads": True})
    assert reward.meta_class_scores == {"accuracy": 1.0, "communication": None, "completeness": 0.0}
    assert reward.weighted_total == reward.total


def test_healthbench_per_axis_scores_on_an_example():
    met = {"c1": True, "c2": True, "c3": False, "c4": True, "c6": True}
    assert meta_class_scores(HEALTHBENCH, met) == {
        "accuracy": pytest.approx((10 - 8) / 10),
        "communication_quality": None,  # only a negative criterion: no score, as HealthBench's per-tag None
        "completeness": pytest.approx(6 / 10),
        "context_awareness": 0.0,
    }
    assert weighted_sum(HEALTHBENCH, met).total == pytest.approx((10 - 8 + 6 - 3) / 25)
    assert healthbench_score(HEALTHBENCH[1:2], {"c2": False}) is None
    assert healthbench_score(HEALTHBENCH[:2], {"c1": False, "c2": True}) == 0.0  # clipped, never below 0


def test_a_set_of_only_negative_rubrics_keeps_a_weighted_total():
    only_bad = [r for r in RUBRICS if r.points < 0]
    assert weighted_sum(only_bad, {}).total == 1.0
    assert weighted_sum(only_bad, {"pads": True}).total == 0.0


def test_alternating_rewards_the_active_class_alone_and_keeps_the_weighted_total():
    met = {"c1": True, "c4": True, "c5": True}
    reward = alternating(HEALTHBENCH, met, active="completeness")
    assert reward.total == 1.0 and reward.active_meta_class == "completeness" and not reward.masked
    assert reward.weighted_total == pytest.approx(20 / 25)
    assert reward.meta_class_scores == meta_class_scores(HEALTHBENCH, met)
    assert alternating(HEALTHBENCH, met, active="context_awareness").total == 0.0


def test_under_alternating_a_penalty_only_class_penalises_in_every_phase():
    met = {"correct": True, "steps": True}
    assert alternating(RUBRICS, met, active="accuracy").total == 1.0
    padded = alternating(RUBRICS, {**met, "pads": True}, active="accuracy")  # `communication` has only a penalty
    assert padded.total == pytest.approx((5 - 4) / 5) and padded.meta_class_scores["communication"] is None
    assert alternating(RUBRICS, {**met, "pads": True}, active="completeness").total == 0.0  # (3 - 4) / 3, clipped
    # A penalty inside a class with positive points stays that class's own.
    assert alternating(HEALTHBENCH, {"c4": True, "c5": True, "c2": True}, active="completeness").total == 1.0


def test_alternating_without_an_active_class_is_the_weighted_sum():
    met = {"c1": True}
    assert alternating(HEALTHBENCH, met) == weighted_sum(HEALTHBENCH, met)


def test_an_undefined_active_class_falls_back_to_the_weighted_total_or_masks_the_sample():
    met = {"c1": True, "c6": True}
    given = alternating(HEALTHBENCH, met, active="communication_quality", undefined="weighted_total")
    assert given.total == given.weighted_total == pytest.approx((10 - 3) / 25) and not given.masked
    masked = alternating(HEALTHBENCH, met, active="communication_quality", undefined="mask")
    assert masked.total is None and masked.masked
    assert masked.weighted_total == given.weighted_total
    # a class the rollout's set does not have at all is undefined too
    assert alternating(HEALTHBENCH, met, active="instruction_following", undefined="mask").masked


def test_unknown_ids_do_not_count():
    assert weighted_sum(RUBRICS, {"made-up": True}).total == 0.0


def test_policies_are_named_and_unknown_names_fail_clearly():
    assert policy("weighted_sum") is weighted_sum
    assert policy("alternating") is alternating
    with pytest.raises(ValueError, match="unknown reward policy 'nope'"):
        policy("nope")
