"""What the adapters put in a trainer's log: per sample (ART's and verifiers' metrics, verl's extra keys) and per
batch (TRL's log_metric). The frameworks reading them back: tests/system/test_trl.py, test_verl.py, test_art.py,
test_verifiers.py."""

from rubricd.adapters.reward import batch_metrics, sample_metrics
from rubricd.messages import JudgeStatus, RubricResult, Score


def score(status: JudgeStatus = JudgeStatus.OK, version: int = 1, met=(), unmet=(), meta=None) -> Score:
    results = [RubricResult(rubric_id=r, met=True, points=1) for r in met]
    results += [RubricResult(rubric_id=r, met=False, points=1) for r in unmet]
    ok = status is JudgeStatus.OK
    return Score(
        run_id="r",
        rollout_id=f"x{len(results)}{version}",
        step=0,
        status=status,
        reward=1.0 if ok else None,
        rubric_version=version,
        results=results if ok else [],
        meta_class_scores=meta or {},
    )


def test_a_samples_figures_are_its_rubrics_verdicts_its_meta_classes_scores_and_its_version():
    figures = sample_metrics(score(version=3, met=["correct"], unmet=["pads"], meta={"accuracy": 0.5}))
    assert figures == {"rubric_version": 3.0, "rubric/correct": 1.0, "rubric/pads": 0.0, "meta/accuracy": 0.5}


def test_a_batchs_rates_count_each_rubric_over_the_samples_judged_on_it_and_failures_over_all():
    batch = [
        score(version=1, met=["correct"], unmet=["pads"], meta={"accuracy": 1.0}),
        score(version=2, unmet=["correct"]),  # a newer set without `pads`; accuracy undefined here
        score(JudgeStatus.JUDGE_FAILED),
        score(version=2, met=["correct", "pads"], meta={"accuracy": 0.0}),
    ]
    assert batch_metrics(batch) == {
        "rubricd/judge_failed": 0.25,
        "rubricd/rubric_version": 2.0,
        "rubricd/rubric/correct": 2 / 3,
        "rubricd/rubric/pads": 0.5,
        "rubricd/meta/accuracy": 0.5,
    }
    assert batch_metrics([score(JudgeStatus.JUDGE_FAILED)]) == {"rubricd/judge_failed": 1.0}
    assert batch_metrics([]) == {}
