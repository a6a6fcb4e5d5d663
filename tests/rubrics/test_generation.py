"""Rubric generation without a broker: the simulated generator; and the one-generation-per-instance rule with
several rubric caches (as several scorers) on the real Redis."""

import asyncio
import hashlib
import time

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import (
    Action,
    Event,
    EventKind,
    Rubric,
    RubricModification,
    Score,
    StepSummary,
    Strategy,
)
from rubricd_services.cli.redis_acl import services
from rubricd_services.judges import rollouts, verdicts
from rubricd_services.judges.scoring import Judging, ReadySet, Scoring, score_rollout
from rubricd_services.llm import LLMError
from rubricd_services.rubrics.draft import RubricDraft, build, draft_type
from rubricd_services.rubrics.generation import Generator
from rubricd_services.rubrics.prompting import messages as generator_messages
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.rubrics.sets import RubricCache
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings
from rubricd_services.state.promotion import Candidates
from rubricd_services.state.rubric_sets import RubricStore
from rubricd_services.updater.prompting import MemoryBudget, Prompts
from rubricd_services.updater.proposal import Limits, UpdateProposal
from rubricd_services.updater.update import RubricUpdater
from rubricd_testbed.simulator import generating, judging
from rubricd_testbed.simulator.faults import FaultPlan, SimConfig, directive
from tests.factories import rubric, rubric_set

from .examples import ANCHORS, CLASSES, PROMPT, primes

JUDGING = Judging(llm=LLMSettings(), template=prompts.load("rubricd_services.judges", verdicts.JUDGE))

SEED = [*ANCHORS, rubric("shows_reasoning", criterion="The response shows its reasoning.", meta_class="accuracy")]


# The simulated generator (test tool).


def simulated_draft(prompt: str, reference: str | None, anchors=ANCHORS, max_rubrics: int = 8) -> RubricDraft:
    messages = generator_messages("", primes(prompt=prompt, reference=reference), anchors, CLASSES, max_rubrics)
    answer = generating.draft(messages[0]["content"], messages[1]["content"])
    return msgspec.convert(answer, draft_type(CLASSES, max_rubrics))


def test_the_simulated_generator_writes_a_hard_rule_per_constraint_and_principles_from_the_prompt():
    draft = simulated_draft("Give three primes as a bulleted list, in at most 12 words, in JSON.", "2, 3, 5")
    rules = {(r.rule, r.meta_class): r.criterion for r in draft.rubrics}
    hard = [r.criterion for r in draft.rubrics if r.rule == "hard_rule"]
    assert len(hard) == 3 and any("12 words" in c for c in hard) and any("list" in c for c in hard)
    assert any("JSON" in c for c in hard)
    assert "2, 3, 5" in rules[("principle", "accuracy")]
    unconstrained = simulated_draft("Describe the water cycle.", None)
    assert {r.rule for r in unconstrained.rubrics} == {"principle"}
    assert any("water cycle" in r.criterion for r in unconstrained.rubrics)  # no reference: the prompt's subject
    assert len(simulated_draft("Give a bulleted list in at most 9 words, in JSON.", "x", max_rubrics=2).rubrics) == 2


async def test_the_simulated_generator_s_rubrics_are_judged_by_matching_heuristics():
    """A response that keeps the prompt's constraints and holds the reference earns more than one that does not."""
    draft = simulated_draft(PROMPT, "2, 3, 5")
    rubrics = build(draft, ANCHORS, CLASSES, 8).rubrics
    current = rubric_set(*rubrics)
    system = rollouts.system_message(prompts.load("rubricd_services.judges", verdicts.JUDGE), current)

    async def sim_judge(messages, verdict):
        return msgspec.convert(judging.verdict(messages[0]["content"], messages[1]["content"]), verdict)

    short = msgspec.structs.replace(primes(), response="2, 3, 5.")
    long = msgspec.structs.replace(primes(), response="Primes are numbers. " * 30 + "Maybe 4.")
    rubrics_ = ReadySet(current, system)
    good = await score_rollout(short, Scoring(rubrics_, "weighted_sum"), sim_judge)
    bad = await score_rollout(long, Scoring(rubrics_, "weighted_sum"), sim_judge)
    assert good.reward == 1.0 and bad.reward == 0.0


def test_a_fault_marker_scoped_to_an_agent_fails_only_that_agent_s_requests():
    d = directive({}, ["a prompt [sim:fail=500,times=1,agent=RubricDraft]"])
    plan = FaultPlan()
    assert plan.decide(SimConfig(), d, b"judge", "JudgeVerdict") is None
    assert plan.decide(SimConfig(), d, b"gen", "RubricDraft") == "500"
    assert plan.decide(SimConfig(), d, b"gen", "RubricDraft") is None  # times=1


# One generation per instance, on the real Redis: several caches stand for several scorers.


class Asked:
    """A generator agent answering as the simulator does, counting its calls; `failing` makes it fail."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[str] = []
        self.delay = delay
        self.failing: str | None = None

    async def __call__(self, run_id, agent, messages, type_):
        self.calls.append(agent)
        await asyncio.sleep(self.delay)
        if self.failing:
            raise LLMError(agent, 2, self.failing)
        return msgspec.convert(generating.draft(messages[0]["content"], messages[1]["content"]), type_)


def cache(redis, keys: Keys, asked: Asked, seeds: Seeds | None = None, lock_s: float = 10.0) -> RubricCache:
    generator = Generator(
        redis,
        keys,
        asked,
        template="Write rubrics.",
        model="gen-model",
        meta_classes=CLASSES,
        service="scorer",
        lock_s=lock_s,
    )
    return RubricCache(
        RubricStore(redis, keys),
        seeds or Seeds(SEED),
        per_instance=True,
        prepare=JUDGING.prepare,
        generator=generator,
    )


async def events(redis, keys: Keys, kind: EventKind) -> list[Event]:
    found = [wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events)]
    return [e for e in found if e.kind == kind]


async def test_many_scorers_and_rollouts_of_a_new_prompt_make_one_generation_as_version_1(redis, keys):
    asked = Asked(delay=0.3)
    scorers = [cache(redis, keys, asked) for _ in range(4)]
    got = await asyncio.gather(*(scorers[i % 4].get(primes(i=i)) for i in range(40)))
    assert asked.calls == ["generator"]
    assert {(r.set.version, r.generation) for r in got} == {(1, "generated")}
    stored = await RubricStore(redis, keys).current("run", got[0].set.instance_key)
    assert stored == got[0].set and stored.rubrics[:2] == ANCHORS  # anchors kept; the seed's adaptive one replaced
    assert "shows_reasoning" not in {r.id for r in stored.rubrics}
    assert {r.rule for r in stored.rubrics[2:]} == {"hard_rule", "principle"}
    assert stored.generated_by.model == "gen-model" and stored.step is None
    assert stored.generated_by.prompt_sha256 == hashlib.sha256(b"Write rubrics.").hexdigest()
    [event] = await events(redis, keys, EventKind.RUBRICS_GENERATED)
    assert event.fields["version"] == 1 and event.fields["hard_rules"] == 1
    later = await cache(redis, keys, asked).get(primes(step=3))  # a new scorer, a later step: the stored set
    assert later.set == stored and later.generation == "generated" and asked.calls == ["generator"]


async def test_a_failed_generation_falls_back_for_its_step_and_a_later_step_retries(redis, keys):
    asked = Asked()
    asked.failing = "HTTP 500"
    scorers = [cache(redis, keys, asked) for _ in range(2)]
    first = await asyncio.gather(*(scorers[i % 2].get(primes(step=2, i=i)) for i in range(6)))
    assert len(asked.calls) == 1
    assert {(r.set.version, r.generation) for r in first} == {(0, "fallback")}
    assert "HTTP 500" in first[0].generation_error and first[0].set.rubrics == SEED
    instance = first[0].set.instance_key
    assert await RubricStore(redis, keys).current("run", instance) is None  # the fallback is not stored
    asked.failing = None
    again = await cache(redis, keys, asked).get(primes(step=2, i=9))  # the same step, another scorer: no retry
    assert again.generation == "fallback" and len(asked.calls) == 1
    retried = await asyncio.gather(*(scorers[i % 2].get(primes(step=3, i=i)) for i in range(6)))
    assert len(asked.calls) == 2
    assert {(r.set.version, r.generation, r.generation_error) for r in retried} == {(1, "generated", None)}
    assert await redis.get(keys.generation_failure("run", instance)) is None
    assert len(await events(redis, keys, EventKind.RUBRICS_GENERATION_FAILED)) == 1


async def test_the_fallback_shows_on_the_score_and_an_invalid_draft_is_a_failure(redis, keys):
    asked = Asked()
    rubrics = await cache(redis, keys, asked).get(primes(prompt="[sim:nothing] "))  # a valid draft first
    assert rubrics.generation == "generated"

    async def nothing_valid(run_id, agent, messages, type_):
        return msgspec.convert(
            {"rubrics": [{"criterion": "Be good.", "points": 1, "meta_class": "accuracy", "rule": "principle"}]}, type_
        )

    generator = Generator(redis, keys, nothing_valid, template="T", model="m", meta_classes=CLASSES, service="scorer")
    failed = await RubricCache(
        RubricStore(redis, keys),
        Seeds(SEED),
        per_instance=True,
        prepare=JUDGING.prepare,
        generator=generator,
    ).get(primes(prompt="another prompt"))
    assert failed.generation == "fallback" and "no valid rubric" in failed.generation_error

    async def judged(messages, verdict):
        return msgspec.convert({i: {"explanation": "", "met": True} for i in failed.ids}, verdict)

    score = await score_rollout(primes(prompt="another prompt"), Scoring(failed, "weighted_sum"), judged)
    assert (score.rubrics_generation, score.rubric_version, score.error) == ("fallback", 0, None)
    assert "no valid rubric" in score.rubrics_generation_error
    assert msgspec.json.decode(msgspec.json.encode(score), type=Score) == score


async def test_a_holder_that_died_lets_its_lock_expire_and_another_scorer_generates(redis, keys):
    asked = Asked()
    instance = cache(redis, keys, asked).key(primes())[1]
    await redis.set(keys.generation_lock("run", instance), b"dead-holder", px=1500)  # never renewed, never released
    started = time.monotonic()
    got = await cache(redis, keys, asked, lock_s=1.5).get(primes())
    assert got.generation == "generated" and asked.calls == ["generator"]
    # It waited out the dead holder's lock (1.5 s), and not forever: the upper bound is generous for a loaded machine.
    assert 1.0 < time.monotonic() - started < 30


async def test_predefined_instances_and_generation_off_are_not_generated(redis, keys):
    asked = Asked()
    instance = "known"
    predefined = Seeds(SEED, {instance: ANCHORS})
    got = await cache(redis, keys, asked, seeds=predefined).get(primes(instance_key=instance))
    assert got.set.rubrics == ANCHORS and got.set.version == 1 and got.generation is None
    off = RubricCache(
        RubricStore(redis, keys),
        Seeds(SEED),
        per_instance=True,
        prepare=JUDGING.prepare,
    )
    assert (await off.get(primes())).set.rubrics == SEED and asked.calls == []


class NoMemory:
    """The updater's memory, with nothing in it (static and dynamic memory switched off)."""

    def __init__(self) -> None:
        self.items = []

    async def put(self, items):
        self.items += items
        return []

    async def recent(self, *args, **kwargs):
        return []


async def test_the_updater_evolves_a_generated_set_like_any_other(redis, keys):
    asked = Asked()
    generated = (await cache(redis, keys, asked).get(primes())).set
    added = Rubric(
        id="no_flattery", criterion="The response flatters the user.", points=-3, meta_class="communication_quality"
    )
    proposal = UpdateProposal(
        strategy=Strategy.CORRECTIVE,
        rationale="flattery seen",
        modifications=[RubricModification(action=Action.ADD, rubric=added, rationale="flattery seen")],
    )

    async def propose(run_id, agent, messages, type_):
        return msgspec.convert(msgspec.to_builtins(proposal), type_)

    store = RubricStore(redis, keys)
    updater = RubricUpdater(
        store=store,
        candidates=Candidates(redis, keys),
        memory=NoMemory(),
        ask=propose,
        prompts=Prompts.load(),
        seeds=Seeds(SEED),
        limits=Limits(),
        budget=MemoryBudget(static=False, dynamic=False),
    )
    summary = StepSummary(run_id="run", step=0, instance_key=generated.instance_key, executive_summary="flattery")
    outcome = await updater.update(summary, generated.instance_key)
    assert outcome.kind is EventKind.RUBRICS_UPDATED and outcome.current.version == 2
    *kept, new = outcome.current.rubrics
    assert kept == generated.rubrics and new.id == "no_flattery"  # anchors and generated rubrics (rules) kept
    history = await store.history("run", generated.instance_key)
    assert history[0].generated_by is not None and history[1].generated_by is None
    after = await cache(redis, keys, asked).get(primes(step=1))
    assert (after.set.version, after.generation) == (2, None) and asked.calls == ["generator"]


async def test_the_scorer_s_redis_user_may_do_everything_generation_does(stack, redis, keys):
    """Under the scorer's ACL (cli.redis_acl): the lock (taken, renewed, waited on, released), the failure record
    (written, read, deleted), the set's publication and the events; Redis refuses nothing."""
    [user] = [u for u in services(keys) if u.name == "scorer"]
    name = f"scorer-{keys.namespace}"
    await redis.execute_command("ACL", "SETUSER", name, "on", ">pw", *user.rules().split())
    scorer_redis = Redis.from_url(stack.redis_url, username=name, password="pw")
    try:
        asked = Asked(delay=0.5)  # longer than a renewal period (lock_s / 3)
        asked.failing = "HTTP 500"
        scorers = [cache(scorer_redis, keys, asked, lock_s=1.0) for _ in range(2)]
        failed = await asyncio.gather(*(s.get(primes(step=0)) for s in scorers))
        asked.failing = None
        generated = await asyncio.gather(*(s.get(primes(step=1)) for s in scorers))
    finally:
        await scorer_redis.aclose()
        await redis.execute_command("ACL", "DELUSER", name)
    assert [r.generation for r in failed + generated] == ["fallback"] * 2 + ["generated"] * 2
    assert len(asked.calls) == 2
    refused = [e for e in await redis.acl_log() if e.get("username") == name]
    assert refused == []


async def test_a_retry_after_the_updater_seeded_the_instance_is_that_set_s_next_version(redis, keys):
    """The updater seeds an instance it summarizes (updater.update.current_set) while its generation had failed:
    the fallback is then that stored set, and the retry publishes the generated rubrics on top of it."""
    asked = Asked()
    asked.failing = "HTTP 500"
    scorer = cache(redis, keys, asked)
    instance = scorer.key(primes())[1]
    assert (await scorer.get(primes(step=0))).generation == "fallback"
    store = RubricStore(redis, keys)
    await store.seed(rubric_set(*SEED, instance_key=instance))  # as the updater does
    asked.failing = None
    late = await cache(redis, keys, asked).get(primes(step=0, i=1))
    assert (late.set.version, late.generation) == (1, "fallback") and len(asked.calls) == 1
    retried = await scorer.get(primes(step=1))
    assert (retried.set.version, retried.generation) == (2, "generated") and len(asked.calls) == 2
    assert retried.set.rubrics[:2] == ANCHORS and "shows_reasoning" not in retried.ids
    assert (await store.current("run", instance)) == retried.set
