"""Rubric generation in the scorer service: several scorer processes, the real Redis and the LLM simulator."""

import hashlib

import pytest

from rubricd import RubricdClient, wire
from rubricd.messages import Event, EventKind, JudgeStatus, Rollout, instance_key
from rubricd_services.rubrics import generation
from rubricd_services.runtime import prompts
from rubricd_services.state import usage
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rollout

pytestmark = pytest.mark.integration

GENERATING = {"rubrics_mode": "per_instance", "generate_rubrics": "true"}
SEED_IDS = {"correct", "addresses_grader", "shows_reasoning"}  # the built-in seed
ANCHOR_IDS = {"correct", "addresses_grader"}


def rollouts(prompt: str, step: int, n: int, *, first: int = 0) -> list[Rollout]:
    return [
        rollout(
            i,
            step=step,
            prompt=prompt,
            response="2, 3, 5." if i % 2 else "Primes: 2, 3, 5. " * 20,
            reference="2, 3, 5",
        )
        for i in range(first, first + n)
    ]


async def events(redis, keys, kind: EventKind) -> list[Event]:
    found = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    return [e for e in found if e.kind == kind]


async def generator_calls(redis, keys) -> int:
    return sum(u.calls for u in await usage.read(redis, keys, "run") if u.agent == generation.GENERATOR)


async def test_a_burst_of_one_new_prompt_across_scorers_makes_one_generation_and_every_score_uses_it(
    stack, redis, keys, start_scorer
):
    # Every call of this prompt takes 400 ms, so the generation is still running when all three scorers have
    # their share of the burst; the judge cache is off, so judging is spread over the scorers too.
    prompt = "List three prime numbers as a bulleted list, in at most 15 words. [sim:latency_ms=400]"
    scorers = [start_scorer(**GENERATING, max_records=2, max_in_flight=8, judge_cache_ttl_s=0) for _ in range(3)]
    batch = rollouts(prompt, 0, 36)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score(batch, timeout=90)
    instance = instance_key(batch[0])
    stored = await RubricStore(redis, keys).current("run", instance)
    assert stored is not None and stored.version == 1 and stored.generated_by is not None
    assert stored.generated_by.model == "rubricd-simulator"
    assert (
        stored.generated_by.prompt_sha256
        == hashlib.sha256(prompts.load("rubricd_services.rubrics", generation.GENERATOR).encode()).hexdigest()
    )
    ids = [r.id for r in stored.rubrics]
    assert ids[:2] == ["correct", "addresses_grader"]  # the anchors, first
    assert {r.rule for r in stored.rubrics[2:]} == {"hard_rule", "principle"}
    for score in scores:
        assert score.status is JudgeStatus.OK
        assert (score.rubric_version, score.rubrics_generation, score.rubrics_generation_error) == (
            1,
            "generated",
            None,
        )
        assert [r.rubric_id for r in score.results] == ids
    # Short answers keep the word limit; padded ones break it and pad: the generated rubrics tell them apart.
    short = [s.reward for i, s in enumerate(scores) if i % 2]
    padded = [s.reward for i, s in enumerate(scores) if not i % 2]
    assert min(short) > max(padded)
    assert len(await events(redis, keys, EventKind.RUBRICS_GENERATED)) == 1
    assert await generator_calls(redis, keys) == 1
    waited = [p for p in scorers if "waits for another process" in p.log.read_text()]
    assert waited, "no scorer waited for another's generation: the burst did not reach several processes"


async def test_a_failed_generation_falls_back_to_the_seed_and_a_later_step_retries(stack, redis, keys, start_scorer):
    # The generator's first attempt of this prompt fails (the judge reads the same marker and is not affected);
    # with no retries of its own, that generation fails, and the next one (a later step) succeeds.
    prompt = "Name three prime numbers. [sim:fail=500,times=1,agent=RubricDraft]"
    for _ in range(2):
        start_scorer(**GENERATING, agents__generator__max_retries=0)
    instance = instance_key(rollouts(prompt, 0, 1)[0])
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        first = await client.score(rollouts(prompt, 0, 8), timeout=60)
        late = await client.score_one(rollouts(prompt, 0, 1, first=8)[0], timeout=30)  # the same step: no retry
        stored = await RubricStore(redis, keys).current("run", instance)
        failed = await events(redis, keys, EventKind.RUBRICS_GENERATION_FAILED)
        retried = await client.score(rollouts(prompt, 1, 8), timeout=60)
    for score in [*first, late]:
        assert score.status is JudgeStatus.OK and score.reward is not None
        assert (score.rubric_version, score.rubrics_generation) == (0, "fallback")
        assert "500" in score.rubrics_generation_error and score.error is None
        assert {r.rubric_id for r in score.results} == SEED_IDS
    assert stored is None  # the fallback was not stored: the retry can still write version 1
    assert len(failed) == 1 and failed[0].step == 0 and "500" in failed[0].detail
    for score in retried:
        assert (score.status, score.rubric_version, score.rubrics_generation) == (JudgeStatus.OK, 1, "generated")
        assert {r.rubric_id for r in score.results} > ANCHOR_IDS
        assert "shows_reasoning" not in {r.rubric_id for r in score.results}
    assert len(await events(redis, keys, EventKind.RUBRICS_GENERATED)) == 1
    assert len(await events(redis, keys, EventKind.RUBRICS_GENERATION_FAILED)) == 1
    assert await redis.get(keys.generation_failure("run", instance)) is None
    assert await generator_calls(redis, keys) == 1  # the successful one (a failed call has no usage to count)


async def test_without_generation_a_new_instance_is_seeded_as_before(stack, redis, keys, start_scorer):
    start_scorer(rubrics_mode="per_instance")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        score = await client.score_one(rollouts("Name three prime numbers.", 0, 1)[0], timeout=30)
    assert (score.rubric_version, score.rubrics_generation) == (1, None)
    assert {r.rubric_id for r in score.results} == SEED_IDS
    assert await generator_calls(redis, keys) == 0
