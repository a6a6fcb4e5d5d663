"""The judge cache's key and its choice of verdict (no server needed), and the verdicts the score's commit
keeps (the real Redis)."""

import asyncio

import msgspec
import pytest

from rubricd.keys import SCORERS
from rubricd.messages import EventKind, JudgeStatus, Rollout, Rubric, RubricSet, Score
from rubricd_services.judges import cache, rollouts, verdicts
from rubricd_services.judges.cache import JudgeCache, VerdictCache, digest
from rubricd_services.judges.caller import JudgeFailed
from rubricd_services.judges.scoring import ReadySet
from rubricd_services.runtime import prompts
from rubricd_services.runtime.answering import ROLLOUTS, Answered, Answering
from rubricd_services.scorer import effects
from rubricd_services.scorer.settings import ScorerSettings
from rubricd_services.settings import LLMSettings
from tests.factories import rollout, rubric_set

RUBRICS = [Rubric(id="correct", criterion="The answer is correct.", points=5, kind="anchor")]
SET = rubric_set(*RUBRICS, version=3)
JUDGE = LLMSettings(model="judge-model", temperature=0.0)
ROLLOUT = rollout(rollout_id="r1", reference="4")
TEMPLATE = prompts.load("rubricd_services.judges", verdicts.JUDGE)


def key(
    rubric_set: RubricSet = SET,
    settings: LLMSettings = JUDGE,
    rollout: Rollout = ROLLOUT,
    template: str = TEMPLATE,
) -> str:
    return digest(rubric_set, settings, rollouts.messages(rollouts.system_message(template, rubric_set), rollout))


def test_the_same_call_has_the_same_key_whatever_the_rollout_id_step_or_base_url():
    again = msgspec.structs.replace(ROLLOUT, rollout_id="r2", step=7)
    elsewhere = JUDGE.model_copy(update={"base_url": "http://other:8000/v1", "concurrency": 3})
    assert key() == key(rollout=again) == key(settings=elsewhere)
    assert len(key()) == 64  # sha256, hex


def test_a_changed_judge_rubric_set_prompt_or_content_changes_the_key():
    changed = [
        key(rubric_set=msgspec.structs.replace(SET, version=4)),  # a new version, rubrics unchanged
        key(rubric_set=msgspec.structs.replace(SET, run_id="other")),
        key(rubric_set=msgspec.structs.replace(SET, instance_key="q1")),
        key(rubric_set=msgspec.structs.replace(SET, rubrics=[msgspec.structs.replace(RUBRICS[0], points=4)])),
        key(settings=JUDGE.model_copy(update={"model": "another-model"})),
        key(settings=JUDGE.model_copy(update={"temperature": 0.7})),
        key(template=TEMPLATE + "\nBe strict."),
        key(rollout=msgspec.structs.replace(ROLLOUT, response="5")),
        key(rollout=msgspec.structs.replace(ROLLOUT, prompt="What is 2 + 3?")),
        key(rollout=msgspec.structs.replace(ROLLOUT, reference=None)),
    ]
    assert len({key(), *changed}) == len(changed) + 1


async def test_the_score_commit_keeps_a_new_verdict_for_the_ttl_and_the_next_read_decodes_it(redis, keys):
    verdict = verdicts.verdict_type(("correct",))
    answer = msgspec.convert({"correct": {"explanation": "right", "met": True}}, verdict)
    settings = ScorerSettings.model_construct(
        **{"answer_ttl_s": 60, "reply_ttl_s": 60, "kept_maxlen": 0, "kept_ttl_s": 60, "stream_maxlen": 100},
        **{"max_rollout_bytes": 1_000_000, "schedule_stats_ttl_s": 60, "judge_cache_ttl_s": 1},
        analyze_evaluation=False,
    )
    scorer = Answering[Rollout, Score](ROLLOUTS, effects.SCRIPT, settings, redis, keys)  # the scorer's commit alone
    await redis.xgroup_create(keys.rollouts, SCORERS, id="0", mkstream=True)
    entry = await redis.xadd(keys.rollouts, {"__data__": b"{}"})
    score = Score(run_id="run", rollout_id="r1", step=0, status=JudgeStatus.OK, reward=1.0, rubric_version=3)
    event = ROLLOUTS.event(ROLLOUT, EventKind.ROLLOUT_SCORED, "")
    messages = rollouts.messages(rollouts.system_message(TEMPLATE, SET), ROLLOUT)
    asked = []

    async def ask(messages, verdict):
        asked.append(1)
        return answer

    first = VerdictCache(redis, keys, 60).judge(ask, SET, JUDGE, ROLLOUT, on=True)
    assert await first(messages, verdict) == answer and not first.answered and asked == [1]
    assert first.keep == (keys.verdict(key()), cache.encode(answer))  # its digest: of the messages it was given
    kept = effects.values(keys, settings, ROLLOUT, score, first.keep)
    assert await scorer.commit_answer(entry, ROLLOUT, Answered(score, event, {}, kept))
    elsewhere = VerdictCache(redis, keys, 60).judge(
        ask, SET, JUDGE, ROLLOUT, on=True
    )  # another process: reads the kept one
    assert await elsewhere(messages, verdict) == answer and elsewhere.answered and elsewhere.keep is None
    assert asked == [1]
    read = await redis.get(keys.verdict(key()))
    calls = []

    async def call():
        calls.append(1)
        return answer

    assert await JudgeCache(60).verdict("k", verdict, read, call) == (answer, True) and calls == []
    another_list = verdicts.verdict_type(("correct", "other"))  # another rubric list: a miss, so the judge is asked
    assert await JudgeCache(60).verdict("k", another_list, read, call) == (answer, False) and calls == [1]
    assert await JudgeCache(60).verdict("k", verdict, b'{"other": 1}', call) == (answer, False) and calls == [1, 1]
    assert 0 < await redis.pttl(keys.verdict(key())) <= 1000
    unkept = effects.values(keys, settings, ROLLOUT, score)
    assert await scorer.commit_answer(entry, ROLLOUT, Answered(score, event, {}, unkept)) is False  # scored already
    assert await redis.exists(keys.verdict("other")) == 0


async def test_a_verdict_read_ahead_answers_its_call_without_another_read_and_other_messages_read_their_own(
    redis, keys
):
    verdict = verdicts.verdict_type(("correct",))
    answer = msgspec.convert({"correct": {"explanation": "right", "met": True}}, verdict)
    messages = rollouts.messages(rollouts.system_message(TEMPLATE, SET), ROLLOUT)
    asked = []

    async def ask(messages, verdict):
        asked.append(messages)
        return answer

    [call] = ReadySet(SET, rollouts.system_message(TEMPLATE, SET)).calls(ROLLOUT)  # the messages `key` hashes
    judge = VerdictCache(redis, keys, 60).judge(ask, SET, JUDGE, ROLLOUT, on=True)
    assert judge.ahead([call, call]) == ()  # a rollout judged in several calls: each reads its own
    assert judge.ahead([call]) == (keys.verdict(key()),)
    judge.read([cache.encode(answer)])  # as the scorer reads it, with the rollout's stored score
    assert await redis.exists(keys.verdict(key())) == 0  # so only the value read ahead can answer
    assert await judge(messages, verdict) == answer and judge.answered and asked == []
    other = [{**messages[0]}, {"role": "user", "content": "another rollout"}]
    await redis.set(keys.verdict(digest(SET, JUDGE, other)), cache.encode(answer))
    again = VerdictCache(redis, keys, 60).judge(ask, SET, JUDGE, ROLLOUT, on=True)
    again.ahead([call])
    again.read([None])  # nothing kept for these messages; the call is made with others: their own read
    assert await again(other, verdict) == answer and again.answered and asked == []
    off = VerdictCache(redis, keys, 60).judge(ask, SET, JUDGE, ROLLOUT, on=False)
    assert off.ahead([call]) == () and await off(messages, verdict) == answer and asked == [messages]


async def test_a_call_being_made_is_not_made_again_beside_it_and_a_failed_one_is_not_shared(eventually):
    verdict = verdicts.verdict_type(("correct",))
    answer = msgspec.convert({"correct": {"explanation": "right", "met": True}}, verdict)
    cache, calls = JudgeCache(60), []

    async def slow(fails: bool = False):
        calls.append(fails)
        await asyncio.sleep(0.2)
        if fails:
            raise JudgeFailed("HTTP 500")
        return answer

    first, twin = await asyncio.gather(cache.verdict("k", verdict, None, slow), cache.verdict("k", verdict, None, slow))
    assert (first, twin) == ((answer, False), (answer, True)) and len(calls) == 1
    # Done, and its twin read Redis before the commit kept it: shared still, within the cache's ttl ...
    assert await cache.verdict("k", verdict, None, slow) == (answer, True) and len(calls) == 1
    # ... and not past it.
    assert await JudgeCache(0.1).verdict("k", verdict, None, slow) == (answer, False) and len(calls) == 2
    late = JudgeCache(0.1)
    assert await late.verdict("k", verdict, None, slow) == (answer, False) and len(calls) == 3
    await asyncio.sleep(0.1)  # the cache's ttl passes: a reason to sleep, not a race
    assert await late.verdict("k", verdict, None, slow) == (answer, False) and len(calls) == 4

    # A failed call fails its twin at once (the endpoint that failed one would fail the other), and keeps nothing:
    # a later rollout of the same content calls again.
    calls.clear()
    failing = asyncio.create_task(cache.verdict("f", verdict, None, lambda: slow(fails=True)))
    await eventually(lambda: calls[-1:] == [True], "the failing call to be under way", every=0.01)
    with pytest.raises(JudgeFailed):
        await cache.verdict("f", verdict, None, slow)
    with pytest.raises(JudgeFailed):
        await failing
    assert calls == [True]
    assert await cache.verdict("f", verdict, None, slow) == (answer, False) and calls == [True, False]
