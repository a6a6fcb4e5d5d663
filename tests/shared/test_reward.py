"""The reward policy: HealthBench's rule, per meta-class too."""

import pytest

from rubricd.messages import Rubric
from rubricd.reward import policy, weighted_sum

RUBRICS = [
    Rubric(id="correct", criterion="correct answer", points=5, meta_class="accuracy"),
    Rubric(id="steps", criterion="shows steps", points=3, meta_class="completeness"),
    Rubric(id="pads", criterion="pads the answer", points=-4, meta_class="communication"),
]


def test_met_points_over_positive_points():
    assert weighted_sum(RUBRICS, {"correct": True}).total == pytest.approx(5 / 8)
    assert weighted_sum(RUBRICS, {"correct": True, "steps": True}).total == 1.0


def test_negative_rubrics_subtract_and_reward_is_clipped():
    assert weighted_sum(RUBRICS, {"correct": True, "pads": True}).total == pytest.approx(1 / 8)
    assert weighted_sum(RUBRICS, {"pads": True}).total == 0.0
    assert weighted_sum(RUBRICS, {}).total == 0.0


def test_meta_class_scores_apply_the_rule_per_class():
    reward = weighted_sum(RUBRICS, {"correct": True, "pads": True})
    assert reward.meta_class_scores == {"accuracy": 1.0, "communication": 0.0, "completeness": 0.0}
    assert weighted_sum(RUBRICS, {"correct": True}).meta_class_scores["communication"] == 1.0


def test_unknown_ids_do_not_count():
    assert weighted_sum(RUBRICS, {"made-up": True}).total == 0.0


def test_policies_are_named_and_unknown_names_fail_clearly():
    assert policy("weighted_sum") is weighted_sum
    with pytest.raises(ValueError, match="unknown reward policy 'nope'"):
        policy("nope")
