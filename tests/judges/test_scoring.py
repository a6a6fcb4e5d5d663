"""Scoring without a broker: a verdict becomes a Score; a failed judge is visible."""

import msgspec

from rubricd.messages import JudgeStatus, Rubric
from rubricd_services.judges import rollouts, verdicts
from rubricd_services.judges.caller import JudgeFailed
from rubricd_services.judges.scoring import Judging, ReadySet, Scoring, score_rollout
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings
from tests.factories import rollout, rubric_set

SET = rubric_set(
    Rubric(id="correct", criterion="correct", points=5, meta_class="accuracy", kind="anchor"),
    Rubric(id="pads", criterion="pads", points=-5, meta_class="communication"),
    Rubric(id="steps", criterion="steps", points=5, meta_class="completeness"),
    version=4,
)
RUBRICS = ReadySet(SET, rollouts.system_message(prompts.load("rubricd_services.judges", verdicts.JUDGE), SET))
ROLLOUT = rollout(rollout_id="r1", step=2, prompt="q", response="a")


def judge_saying(**met: bool):
    async def call(messages, verdict):
        answer = {k: {"explanation": f"{k} decided", "met": v} for k, v in met.items()}
        return msgspec.convert(answer, verdict)

    return call


async def test_a_verdict_becomes_reward_results_and_meta_class_scores():
    score = await score_rollout(
        ROLLOUT, Scoring(RUBRICS, "weighted_sum"), judge_saying(correct=True, pads=False, steps=True)
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

    await score_rollout(ROLLOUT, Scoring(RUBRICS, "weighted_sum"), call)
    assert asked == [verdicts.verdict_type(("correct", "pads", "steps"))]


async def test_a_failed_judge_gives_no_reward_and_says_why():
    async def failing(messages, verdict):
        raise JudgeFailed("LLM agent 'judge' failed after 4 attempt(s): HTTP 500")

    score = await score_rollout(ROLLOUT, Scoring(RUBRICS, "weighted_sum"), failing)
    assert score.status is JudgeStatus.JUDGE_FAILED
    assert score.reward is None
    assert "HTTP 500" in score.error
    assert score.rubric_version == 4


async def test_the_alternating_policy_scores_the_active_class_and_says_so():
    score = await score_rollout(
        ROLLOUT,
        Scoring(RUBRICS, "alternating", active="completeness"),
        judge_saying(correct=False, pads=False, steps=True),
    )
    assert (score.status, score.reward, score.active_meta_class) == (JudgeStatus.OK, 1.0, "completeness")
    assert score.weighted_total == 0.5 and score.meta_class_scores == {"accuracy": 0.0, "completeness": 1.0}


async def test_a_masked_rollout_has_no_reward_and_says_masked():
    met = judge_saying(correct=True, pads=True, steps=True)
    score = await score_rollout(ROLLOUT, Scoring(RUBRICS, "alternating", active="communication", undefined="mask"), met)
    assert score.status is JudgeStatus.OK and score.reward is None and score.masked
    assert score.weighted_total == 0.5 and score.active_meta_class == "communication"
    fallback = await score_rollout(ROLLOUT, Scoring(RUBRICS, "alternating", active="communication"), met)
    assert fallback.reward == fallback.weighted_total == 0.5 and not fallback.masked


def prepared(style: verdicts.Style) -> ReadySet:
    from rubricd_services.rubrics.sets import InForce

    template = prompts.load("rubricd_services.judges", verdicts.JUDGE)
    return Judging(llm=LLMSettings(), template=template, style=style).prepare(InForce(SET))


async def test_one_call_per_rubric_asks_each_rubric_alone_at_once_and_scores_as_one_call_would():
    asked: list[tuple[str, type]] = []

    async def call(messages, verdict):
        [rubric_id] = [r for r in ("correct", "pads", "steps") if f'"id":"{r}"' in messages[0]["content"]]
        asked.append((rubric_id, verdict))
        return msgspec.convert({rubric_id: {"explanation": "why", "met": rubric_id != "pads"}}, verdict)

    score = await score_rollout(ROLLOUT, Scoring(prepared(verdicts.Style(calls="per_rubric")), "weighted_sum"), call)
    assert sorted(asked) == sorted((r, verdicts.verdict_type((r,))) for r in ("correct", "pads", "steps"))
    one = await score_rollout(
        ROLLOUT, Scoring(RUBRICS, "weighted_sum"), judge_saying(correct=True, pads=False, steps=True)
    )
    assert (
        (score.reward, score.meta_class_scores) == (one.reward, one.meta_class_scores) == (1.0, one.meta_class_scores)
    )
    assert [(r.rubric_id, r.met, r.explanation) for r in score.results] == [
        ("correct", True, "why"),
        ("pads", False, "why"),
        ("steps", True, "why"),
    ]


async def test_one_failed_call_of_several_fails_the_rollout_and_cancels_the_others():
    import asyncio

    cancelled = []

    async def call(messages, verdict):
        if '"id":"pads"' in messages[0]["content"]:
            raise JudgeFailed("HTTP 500")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(verdict)
            raise

    score = await score_rollout(ROLLOUT, Scoring(prepared(verdicts.Style(calls="per_rubric")), "weighted_sum"), call)
    assert score.status is JudgeStatus.JUDGE_FAILED and score.reward is None and score.error == "HTTP 500"
    assert len(cancelled) == 2


async def test_a_judge_without_explanations_is_asked_for_verdicts_alone():
    asked = []

    async def call(messages, verdict):
        asked.append(msgspec.json.schema(verdict))
        # An endpoint that does not enforce the schema may explain anyway: ignored.
        return msgspec.json.decode(
            b'{"correct": {"met": true, "explanation": "x"}, "pads": {"met": false}, "steps": {"met": true}}',
            type=verdict,
        )

    score = await score_rollout(ROLLOUT, Scoring(prepared(verdicts.Style(explain=False)), "weighted_sum"), call)
    assert score.reward == 1.0 and {r.explanation for r in score.results} == {""}
    [schema] = asked
    assert [d["properties"] for d in schema["$defs"].values() if d["title"] == "BareVerdict"] == [
        {"met": {"type": "boolean"}}
    ]
