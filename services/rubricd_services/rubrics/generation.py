"""Rubric generation (Rubric-ARM): a prompt's own rubrics, written once per instance on its first rollout.

The `generator` agent drafts the rubrics (`messages`, `draft`); the valid ones are stored after the anchors as
the instance's version 1. One process generates per (run, instance) under `Keys.generation_lock` while the
others wait; a failed generation falls back to the seed rubrics for that step and is retried on a later one.
The rules: docs/researchers/rubric-arm.md, "Generated rubrics".
"""

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd.messages import EventKind, GeneratedBy, Rubric, RubricKind, RubricSet
from rubricd_services.llm import LLMError, usage
from rubricd_services.llm.usage import Ask
from rubricd_services.runtime import events, locks, prompts
from rubricd_services.runtime.events import Events
from rubricd_services.runtime.service import Clients
from rubricd_services.settings import ServiceSettings
from rubricd_services.state.rubric_sets import RubricStore

from .draft import InvalidDraft, RubricDraft, build, draft_type
from .prompting import messages
from .sets import Generated, Prompted
from .settings import GeneratorSettings
from .validation import RubricLimits

GENERATOR = "generator"  # the agent: its settings are `agents.generator`, its prompt prompts/generator.md
_POLL_S = (0.02, 0.25)  # a waiter's first and longest pause between looks at the lock

log = logging.getLogger("rubricd.rubrics")


def anchors(rubrics: Sequence[Rubric]) -> list[Rubric]:
    """The anchors of a seed or set, in order: a generated set keeps them first, unchanged."""
    return [r for r in rubrics if r.kind == RubricKind.ANCHOR]


# Generating once per instance, across processes.


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    """An instance's last failed generation (`Keys.generation_failure`)."""

    step: int
    error: str
    at: float


@dataclass
class Generator:
    """Writes the rubric set of an instance seen for the first time, once per (run, instance)."""

    redis: Redis
    keys: Keys
    ask: Ask
    template: str
    model: str  # the generator agent's, recorded on the set
    meta_classes: tuple[str, ...]
    service: str  # the service its events name (the scorer, the comparer)
    max_rubrics: int = 8
    max_points: float = RubricLimits.max_points  # a rubric's points lie within -max_points..max_points
    lock_s: float = 10.0
    prompt_chars: int | None = None
    events_maxlen: int = 100_000

    def __post_init__(self) -> None:
        self.store = RubricStore(self.redis, self.keys)
        self.events = Events(self.redis, self.keys, self.events_maxlen)
        self.prompt_sha256 = hashlib.sha256(self.template.encode()).hexdigest()

    async def rubric_set(self, prompted: Prompted, instance_key: str, seed: Sequence[Rubric]) -> Generated:
        """The instance's set: its stored one, the one generated now (here or by another process, waited for), or
        the seed rubrics (`seed`, the instance's would-be seed set) when generation failed at this step."""
        lock_name = self.keys.generation_lock(prompted.run_id, instance_key)
        while True:
            decided = await self._decided(prompted, instance_key, seed)
            if decided is not None:
                return decided
            lock = self.redis.lock(lock_name, timeout=self.lock_s, thread_local=False)
            if await lock.acquire(blocking=False):
                async with locks.held(lock, self.lock_s, f"the rubric generation lock {lock_name}"):
                    decided = await self._decided(prompted, instance_key, seed)  # another holder may have finished
                    return decided or await self._generate(prompted, instance_key, seed)
            log.info("rubric set %s/%s waits for another process's generation", prompted.run_id, instance_key)
            await self._wait_released(lock_name)

    async def _decided(self, prompted: Prompted, instance_key: str, seed: Sequence[Rubric]) -> Generated | None:
        """What the rollout gets without generating now; None: a generation is due."""
        current, failure = await self._state(prompted.run_id, instance_key)
        if _settled(current, failure):
            return _stored(current)
        if failure is not None and failure.step >= prompted.step:
            return self._fallback(prompted, instance_key, current, seed, failure.error)
        return None

    async def _state(self, run_id: str, instance_key: str) -> tuple[RubricSet | None, Failure | None]:
        current = await self.store.current(run_id, instance_key)
        raw = await self.redis.get(self.keys.generation_failure(run_id, instance_key))
        return current, msgspec.json.decode(raw, type=Failure) if raw else None

    async def _generate(self, prompted: Prompted, instance_key: str, seed: Sequence[Rubric]) -> Generated:
        first = anchors(seed)
        classes, most, bound = self.meta_classes, self.max_rubrics, self.max_points
        asked = messages(self.template, prompted, first, classes, most, self.prompt_chars, bound)
        try:
            answer = await self.ask(prompted.run_id, GENERATOR, asked, draft_type(classes, most, bound))
            draft = msgspec.convert(msgspec.to_builtins(answer), RubricDraft)  # the shared types, not the call's
            drafted = build(draft, first, classes, most, bound)
        except (LLMError, InvalidDraft) as e:
            return await self._failed(prompted, instance_key, seed, str(e))
        while True:
            current, failure = await self._state(prompted.run_id, instance_key)
            if _settled(current, failure):
                log.warning("rubric set %s/%s appeared during its generation: kept", prompted.run_id, instance_key)
                return _stored(current)
            now = time.time()
            generated = RubricSet(
                run_id=prompted.run_id,
                instance_key=instance_key,
                version=current.version + 1 if current else 1,
                rubrics=drafted.rubrics,
                created_at=now,
                generated_by=GeneratedBy(model=self.model, prompt_sha256=self.prompt_sha256, generated_at=now),
            )
            if await self.store.publish(generated):
                break
        await self.redis.delete(self.keys.generation_failure(prompted.run_id, instance_key))
        rules = [r.rule for r in drafted.rubrics if r.kind == RubricKind.ADAPTIVE]
        await self._event(
            EventKind.RUBRICS_GENERATED,
            prompted,
            f"v{generated.version}: {len(rules)} generated rubrics beside {len(first)} anchors"
            + (f"; dropped {'; '.join(drafted.dropped)}" if drafted.dropped else ""),
            instance_key=instance_key,
            version=generated.version,
            hard_rules=rules.count("hard_rule"),
            principles=rules.count("principle"),
            dropped=len(drafted.dropped),
            model=self.model,
        )
        return Generated(generated, "generated")

    async def _failed(self, prompted: Prompted, instance_key: str, seed: Sequence[Rubric], error: str) -> Generated:
        """Record the failure at this step (a later step retries), report it, and fall back."""
        failure = Failure(step=prompted.step, error=error, at=time.time())
        await self.redis.set(self.keys.generation_failure(prompted.run_id, instance_key), msgspec.json.encode(failure))
        current = await self.store.current(prompted.run_id, instance_key)
        await self._event(
            EventKind.RUBRICS_GENERATION_FAILED,
            prompted,
            f"the seed rubrics judge this step's rollouts; a later step retries: {error}",
            instance_key=instance_key,
        )
        return self._fallback(prompted, instance_key, current, seed, error)

    @staticmethod
    def _fallback(
        prompted: Prompted, instance_key: str, current: RubricSet | None, seed: Sequence[Rubric], error: str
    ) -> Generated:
        """The stored set if the updater seeded one meanwhile, else the seed rubrics unstored (version 0)."""
        fallback = current or RubricSet(
            run_id=prompted.run_id, instance_key=instance_key, version=0, rubrics=list(seed)
        )
        return Generated(fallback, "fallback", error)

    async def _wait_released(self, name: str) -> None:
        """Until no process holds the lock (it finished, or died and the lock expired)."""
        pause = _POLL_S[0]
        while await self.redis.get(name) is not None:
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL_S[1])

    async def _event(self, kind: EventKind, prompted: Prompted, detail: str, **fields: object) -> None:
        event = events.event(self.service, kind, run_id=prompted.run_id, step=prompted.step, detail=detail, **fields)
        await self.events.publish(event)


def _settled(current: RubricSet | None, failure: Failure | None) -> bool:
    """Whether the stored set stays: a generated one, or one that no failed generation waits to replace (the
    updater's later versions, a predefined or imported set)."""
    return current is not None and (current.generated_by is not None or failure is None)


def _stored(current: RubricSet | None) -> Generated:
    assert current is not None
    return Generated(current, "generated" if current.generated_by is not None else None)


def generator(settings: ServiceSettings, clients: Clients, service: str) -> Generator:
    """A service's generator: the `generator` agent through the LLM client, each call added to its run's usage."""
    assert isinstance(settings, GeneratorSettings)
    agent = settings.agent(GENERATOR)
    return Generator(
        clients.redis,
        clients.keys,
        usage.Metered(clients.llm, clients.redis, clients.keys).structured,
        template=prompts.load(__package__, GENERATOR, settings.generator_prompt),
        model=agent.model,
        meta_classes=tuple(settings.meta_classes),
        max_rubrics=settings.generate_max_rubrics,
        max_points=settings.generate_max_points,
        lock_s=settings.generation_lock_s,
        prompt_chars=agent.prompt_chars(),
        events_maxlen=settings.stream_maxlen,
        service=service,
    )
