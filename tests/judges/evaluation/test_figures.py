"""Judge-eval figures against values worked by hand, without an LLM."""

import pytest

from rubricd.messages import Rubric
from rubricd_services.judges.evaluation.figures import agreement, percentile
from rubricd_services.judges.evaluation.run import Config, Judged, report
from rubricd_services.judges.scoring import Judging
from rubricd_services.settings import LLMSettings, Price

# 10 verdicts: 4 met labelled met (tp), 1 met labelled unmet (fp), 2 unmet labelled met (fn), 3 unmet unmet (tn)
PAIRS = [(True, True)] * 4 + [(False, True)] + [(True, False)] * 2 + [(False, False)] * 3


def test_agreement_of_a_mixed_sample():
    a = agreement(PAIRS)
    assert (a.n, a.true_met, a.false_met, a.false_unmet, a.true_unmet) == (10, 4, 1, 2, 3)
    assert a.accuracy == pytest.approx(0.7)
    # recall of met 4/6, of unmet 3/4
    assert a.balanced_accuracy == pytest.approx((4 / 6 + 3 / 4) / 2)
    # F1 met: 2*4/(8+1+2) = 8/11; F1 unmet: 2*3/(6+2+1) = 6/9
    assert a.macro_f1 == pytest.approx((8 / 11 + 6 / 9) / 2)
    # chance: labels 6 met / 4 unmet, verdicts 5 met / 5 unmet: (6*5 + 4*5)/100 = 0.5; kappa (0.7-0.5)/0.5
    assert a.kappa == pytest.approx(0.4)


def test_figures_a_sample_cannot_define_are_none():
    assert agreement([]).accuracy is None
    every_met = agreement([(True, True)] * 3)
    assert every_met.accuracy == 1.0 and every_met.balanced_accuracy == 1.0 and every_met.macro_f1 == 1.0
    assert every_met.kappa is None  # one answer on both sides: chance agreement is 1
    said_met_always = agreement([(True, True), (False, True)])
    # recall of met 1, of unmet 0; F1 met 2/3, unmet 0 (labelled, never said); kappa 0 (no better than chance)
    assert said_met_always.balanced_accuracy == 0.5 and said_met_always.macro_f1 == pytest.approx(1 / 3)
    assert said_met_always.kappa == pytest.approx(0.0)


def test_percentiles_inclusive():
    assert percentile([], 50) is None and percentile([2.0], 95) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([float(i) for i in range(1, 101)], 95) == pytest.approx(95.05)


def judged(item_id, labels, verdicts, reward, labelled, error=None, tokens=(100, 20), seconds=1.0):
    return Judged(
        item_id=item_id,
        labels=labels,
        meta_classes={"correct": "accuracy", "steps": "reasoning"},
        verdicts=verdicts,
        labelled_reward=labelled,
        reward=reward,
        error=error,
        seconds=seconds,
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
    )


def test_a_report_over_items_by_meta_class_with_reward_error_and_cost():
    items = [
        judged("a", {"correct": True, "steps": True}, {"correct": True, "steps": False}, 0.6, 1.0, seconds=1.0),
        judged("b", {"correct": False, "steps": True}, {"correct": False, "steps": True}, 0.4, 0.4, seconds=2.0),
        judged("c", {"correct": True, "steps": False}, {}, None, 0.6, error="no verdict", tokens=(90, 0), seconds=3.0),
    ]
    config = Config("j", Judging(llm=LLMSettings(model="m"), template="template"))
    r = report(config, "json_schema", items, {"m": Price(prompt_per_mtok=1.0, completion_per_mtok=2.0)})
    assert (r.items, r.format_failures) == (3, 1)
    assert r.overall.n == 4 and r.overall.accuracy == pytest.approx(0.75)  # the failed item's labels not counted
    assert r.by_meta_class["accuracy"].accuracy == 1.0 and r.by_meta_class["reasoning"].accuracy == 0.5
    assert r.by_rubric["steps"].n == 2
    assert r.reward_error == pytest.approx((0.4 + 0.0) / 2)
    assert r.latency_p50_s == 2.0
    assert r.prompt_tokens_per_call == pytest.approx((100 + 100 + 90) / 3)
    assert r.cost == pytest.approx((290 * 1.0 + 40 * 2.0) / 1e6)
    unpriced = report(config, "json_schema", items, {})
    assert unpriced.cost is None


def test_the_labelled_reward_is_the_weighted_sum_of_the_labels():
    from rubricd_services.rubrics.policies import policy

    rubrics = [
        Rubric(id="correct", criterion="c", points=3),
        Rubric(id="steps", criterion="s", points=2, meta_class="reasoning"),
    ]
    assert policy("weighted_sum")(rubrics, {"correct": True, "steps": False}).total == pytest.approx(0.6)


def test_with_several_graders_the_judge_is_compared_with_each_and_the_graders_with_each_other():
    one = Judged(
        item_id="a",
        labels={"x": True, "y": False},
        meta_classes={"x": "accuracy", "y": "accuracy"},
        verdicts={"x": True, "y": True},
        reward=1.0,
        graders={"x": [True, True, False], "y": [False, True]},
    )
    r = report(Config("j", Judging(llm=LLMSettings(model="m"), template="t")), "json_schema", [one], {})
    assert r.pairwise is not None and r.graders_pairwise is not None
    # judge said met for both: 3 labels of x (2 met), 2 of y (1 met): 3 of 5 agree
    assert r.pairwise.n == 5 and r.pairwise.accuracy == pytest.approx(3 / 5)
    # ordered pairs of graders: x has 6 (agreeing: the two True ones, both orders: 2), y has 2 (none agree)
    assert r.graders_pairwise.n == 8 and r.graders_pairwise.accuracy == pytest.approx(2 / 8)
    assert (
        report(Config("j", Judging(llm=LLMSettings(model="m"), template="t")), "json_schema", [], {}).pairwise is None
    )


def test_turn_rubrics_labelled_turn_by_turn_are_compared_turn_by_turn():
    """One verdict per rubric and policy turn: met where the judge names the turn met, as labelled."""
    one = Judged(
        item_id="a",
        labels={"args": False, "correct": True},
        meta_classes={"args": "tool_use", "correct": "accuracy"},
        verdicts={"args": True, "correct": True},
        reward=1.0,
        turn_labels={"args": [4]},  # turn 2's call is bad, turn 4's good, turn 6 makes none
        met_turns={"args": [2, 4]},
        policy_turns=[2, 4, 6],
    )
    r = report(Config("j", Judging(llm=LLMSettings(model="m"), template="t")), "json_schema", [one], {})
    assert r.turns is not None and r.turns.n == 3
    assert (r.turns.true_met, r.turns.false_met, r.turns.true_unmet, r.turns.false_unmet) == (1, 1, 1, 0)
    assert r.overall.n == 2  # the trajectory-level verdicts, as reward reads them
    assert report(Config("j", Judging(llm=LLMSettings(model="m"), template="t")), "json_schema", [], {}).turns is None
