"""Scoring without a broker: a verdict becomes a Score; a failed judge is visible."""

import msgspec

from rubricd.messages import JudgeStatus, Rollout, Rubric, RubricSet
from rubricd.reward import alternating, weighted_sum
from rubricd_services.common import prompts
from rubricd_services.scorer import judge
from rubricd_services.scorer.scoring import JudgeFailed, Rubrics, score_rollout

SET = RubricSet(
    run_id="run",
    version=4,
    rubrics=[
        Rubric(id="correct", criterion="correct", points=5, meta_class="accuracy", kind="anchor"),
        Rubric(id="pads", criterion="pads", points=-5, meta_class="communication"),
        Rubric(id="steps", criterion="steps", points=5, meta_class="completeness"),
    ],
)
RUBRICS = Rubrics(SET, judge.system_message(prompts.load("rubricd_services.scorer", judge.JUDGE), SET))
ROLLOUT = Rollout(run_id="run", rollout_id="r1", step=2, prompt="q", response="a")


def judge_saying(**met: bool):
    async def call(messages, verdict):
        answer = {k: {"explanation": f"{k} decided", "met": v} for k, v in met.items()}
        return msgspec.convert(answer, verdict)

    return call


async def test_a_verdict_becomes_reward_results_and_meta_class_scores():
    score = await score_rollout(
        ROLLOUT, RUBRICS, judge_saying(correct=True, pads=False, steps=True), weighted_sum, "weighted_sum"
    )
    assert score.status is JudgeStatus.OK and score.reward == 1.0
    assert score.rubric_version == 4 and score.step == 2 and score.rollout_id == "r1"
    assert [(r.rubric_id, r.met) for r in score.results] == [("correct", True), ("pads", False), ("steps", True)]
    assert score.meta_class_scores == {"accuracy": 1.0, "completeness": 1.0}
    assert score.undefined_meta_classes == ["communication"] and score.weighted_total == 1.0
    assert score.active_meta_class is None and not score.masked
    assert score.error is None


async def test_the_judge_is_asked_for_a_verdict_on_each_rubric_of_the_set():
    asked = []

    async def call(messages, verdict):
        asked.append(verdict)
        return msgspec.convert({i: {"explanation": "", "met": True} for i in ("correct", "pads", "steps")}, verdict)

    await score_rollout(ROLLOUT, RUBRICS, call, weighted_sum, "weighted_sum")
    assert asked == [judge.verdict_type(("correct", "pads", "steps"))]


async def test_a_failed_judge_gives_no_reward_and_says_why():
    async def failing(messages, verdict):
        raise JudgeFailed("LLM agent 'judge' failed after 4 attempt(s): HTTP 500")

    score = await score_rollout(ROLLOUT, RUBRICS, failing, weighted_sum, "weighted_sum")
    assert score.status is JudgeStatus.JUDGE_FAILED
    assert score.reward is None
    assert "HTTP 500" in score.error
    assert score.rubric_version == 4


async def test_the_alternating_policy_scores_the_active_class_and_says_so():
    score = await score_rollout(
        ROLLOUT,
        RUBRICS,
        judge_saying(correct=False, pads=False, steps=True),
        alternating,
        "alternating",
        active="completeness",
    )
    assert (score.status, score.reward, score.active_meta_class) == (JudgeStatus.OK, 1.0, "completeness")
    assert score.weighted_total == 0.5 and score.meta_class_scores == {"accuracy": 0.0, "completeness": 1.0}


async def test_a_masked_rollout_has_no_reward_and_says_masked():
    met = judge_saying(correct=True, pads=True, steps=True)
    score = await score_rollout(
        ROLLOUT, RUBRICS, met, alternating, "alternating", active="communication", undefined="mask"
    )
    assert score.status is JudgeStatus.OK and score.reward is None and score.masked
    assert score.weighted_total == 0.5 and score.active_meta_class == "communication"
    fallback = await score_rollout(ROLLOUT, RUBRICS, met, alternating, "alternating", active="communication")
    assert fallback.reward == fallback.weighted_total == 0.5 and not fallback.masked
