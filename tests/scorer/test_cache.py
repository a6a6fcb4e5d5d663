"""The judge cache's key (no server needed) and its store (the real Redis)."""

import asyncio

import msgspec
import pytest
from redis.asyncio import Redis

from rubricd.messages import Rollout, Rubric, RubricSet
from rubricd_services.common import prompts
from rubricd_services.common.settings import LLMSettings
from rubricd_services.scorer import judge
from rubricd_services.scorer.cache import JudgeCache, digest
from rubricd_services.scorer.handler import Judged
from rubricd_services.scorer.scoring import JudgeFailed

RUBRICS = [Rubric(id="correct", criterion="The answer is correct.", points=5, kind="anchor")]
SET = RubricSet(run_id="run", version=3, rubrics=RUBRICS)
JUDGE = LLMSettings(model="judge-model", temperature=0.0)
ROLLOUT = Rollout(run_id="run", rollout_id="r1", step=0, prompt="What is 2 + 2?", response="4", reference="4")
TEMPLATE = prompts.load("rubricd_services.scorer", judge.JUDGE)


def key(
    rubric_set: RubricSet = SET,
    settings: LLMSettings = JUDGE,
    rollout: Rollout = ROLLOUT,
    template: str = TEMPLATE,
) -> str:
    return digest(rubric_set, settings, judge.messages(judge.system_message(template, rubric_set), rollout))


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


def test_a_cached_verdict_adds_a_cache_hit_and_no_tokens_and_a_failed_one_nothing():
    assert Judged(cached=True).usage("m") == {"judge:m:cache_hits": 1}
    assert Judged().usage("m") == {}


async def test_a_kept_verdict_is_read_back_as_its_type_and_expires(redis, keys):
    verdict = judge.verdict_type(("correct",))
    answer = msgspec.convert({"correct": {"explanation": "right", "met": True}}, verdict)
    cache = JudgeCache(redis, keys, ttl_s=1)
    assert await cache.get("k", verdict) is None
    await cache.put("k", answer)
    assert await cache.get("k", verdict) == answer
    assert await cache.get("k", judge.verdict_type(("correct", "other"))) is None  # another rubric list: a miss
    await asyncio.sleep(1.2)
    assert await cache.get("k", verdict) is None


async def test_a_ttl_of_0_turns_the_cache_off(redis, keys):
    verdict = judge.verdict_type(("correct",))
    cache = JudgeCache(redis, keys, ttl_s=0)
    await cache.put("k", msgspec.convert({"correct": {"explanation": "", "met": False}}, verdict))
    assert not cache.enabled and await cache.get("k", verdict) is None
    assert await redis.exists(keys.verdict("k")) == 0


async def test_a_call_being_made_is_not_made_again_beside_it_and_a_failed_one_is_not_shared(redis, keys, eventually):
    verdict = judge.verdict_type(("correct",))
    answer = msgspec.convert({"correct": {"explanation": "right", "met": True}}, verdict)
    cache, calls = JudgeCache(redis, keys, ttl_s=60), []

    async def slow(fails: bool = False):
        calls.append(fails)
        await asyncio.sleep(0.2)
        if fails:
            raise JudgeFailed("HTTP 500")
        return answer

    first, twin = await asyncio.gather(cache.verdict("k", verdict, slow), cache.verdict("k", verdict, slow))
    assert (first, twin) == ((answer, False), (answer, True)) and len(calls) == 1
    assert await cache.verdict("k", verdict, slow) == (answer, True) and len(calls) == 1  # kept in Redis

    # A failed call fails its twin at once (the endpoint that failed one would fail the other), and keeps nothing:
    # a later rollout of the same content calls again.
    failing = asyncio.create_task(cache.verdict("f", verdict, lambda: slow(fails=True)))
    await eventually(lambda: calls == [False, True], "the failing call to be under way", every=0.01)
    with pytest.raises(JudgeFailed):
        await cache.verdict("f", verdict, slow)
    with pytest.raises(JudgeFailed):
        await failing
    assert calls == [False, True]
    assert await cache.verdict("f", verdict, slow) == (answer, False) and calls == [False, True, False]


async def test_redis_failing_under_the_cache_makes_a_miss_not_a_failed_score(keys):
    verdict = judge.verdict_type(("correct",))
    answer = msgspec.convert({"correct": {"explanation": "right", "met": True}}, verdict)
    gone = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)  # nothing listens there
    cache = JudgeCache(gone, keys, ttl_s=60)

    async def call():
        return answer

    assert await cache.verdict("k", verdict, call) == (answer, False)
    await gone.aclose()


async def test_a_verdict_read_with_the_score_is_not_read_again(keys):
    verdict = judge.verdict_type(("correct",))
    answer = msgspec.convert({"correct": {"explanation": "right", "met": True}}, verdict)
    gone = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)  # any read here would miss
    cache, calls = JudgeCache(gone, keys, ttl_s=60), []

    async def call():
        calls.append(1)
        return answer

    assert await cache.verdict("k", verdict, call, kept=msgspec.json.encode(answer)) == (answer, True)
    assert calls == []  # the scorer's one read found it: no second read, no call
    assert await cache.verdict("k", verdict, call, kept=None) == (answer, False) and calls == [1]
    assert await cache.verdict("k", verdict, call, kept=b'{"other": 1}') == (answer, False) and calls == [1, 1]
