"""Rubric generation (Rubric-ARM): a prompt's own rubrics, written once per instance on its first rollout.

The `generator` agent drafts the rubrics; `build` keeps the valid ones after the anchors and stores the set as
the instance's version 1. One process generates per (run, instance) under `Keys.generation_lock` while the
others wait; a failed generation falls back to the seed rubrics for that step and is retried on a later one.
The rules: docs/researchers/rubric-arm.md, "Generated rubrics".
"""

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Literal, TypeVar, cast

import msgspec
from pydantic import BaseModel, Field, model_validator
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import EventKind, GeneratedBy, Rubric, RubricKind, RubricSet
from rubricd.store import RubricStore
from rubricd_services.common import events, locks, prompts, usage
from rubricd_services.common.llm import LLMError
from rubricd_services.common.prompts import PromptFile
from rubricd_services.common.service import Clients
from rubricd_services.common.settings import ServiceSettings

from .ids import new_id, normal
from .sets import Prompted

GENERATOR = "generator"  # the agent: its settings are `agents.generator`, its prompt prompts/generator.md
RULES = ("hard_rule", "principle")
MIN_POINTS, MAX_POINTS = -10.0, 10.0
MAX_CRITERION_CHARS = 300
PHRASE = "The response"
_FRAME_CHARS = 200  # the data blocks' tags, keys and quoting around the prompt's texts
_POLL_S = (0.02, 0.25)  # a waiter's first and longest pause between looks at the lock

log = logging.getLogger("rubricd.rubrics")
T = TypeVar("T")
# (run id, agent, messages, answer type) -> an answer of that type; the call is made for that run (usage.Metered)
Ask = Callable[[str, str, list[dict[str, str]], type[T]], Awaitable[T]]
Generation = Literal["generated", "fallback"]


class GeneratorSettings(BaseModel):
    """Rubric generation settings (mixed into the scorer's and the comparer's)."""

    generate_rubrics: bool = Field(
        False,
        description="per_instance mode: the first rollout of an instance without a rubric set has the generator "
        "agent write that prompt's rubrics (anchors kept), stored as its version 1; a failure judges with the seed "
        "rubrics and is retried on a later step",
    )
    generator_prompt: PromptFile = Field(None, description="generator instructions; default: prompts/generator.md")
    generate_max_rubrics: int = Field(8, ge=1, le=20, description="the most rubrics the generator may write a prompt")
    generation_lock_s: float = Field(
        10.0,
        ge=1,
        description="the generation lock's lifetime, renewed every third of it while its holder lives: a process "
        "that dies while generating holds the instance's other rollouts up this long",
    )

    @model_validator(mode="after")
    def _per_instance(self) -> "GeneratorSettings":
        """Generation writes per-instance sets: switched on in global mode, it would silently do nothing."""
        if self.generate_rubrics and getattr(self, "rubrics_mode", "per_instance") != "per_instance":
            raise ValueError("RUBRICD_GENERATE_RUBRICS writes per-instance sets: set RUBRICD_RUBRICS_MODE=per_instance")
        return self


# What the agent returns: the shared types; each call asks for a bounded schema (`draft_type`).


class DraftRubric(msgspec.Struct, frozen=True, kw_only=True):
    criterion: str
    points: float
    meta_class: str
    rule: str


class RubricDraft(msgspec.Struct, frozen=True, kw_only=True):
    """The generator's answer: the prompt's rubrics."""

    rubrics: list[DraftRubric] = []


@lru_cache(maxsize=16)
def draft_type(meta_classes: tuple[str, ...], max_rubrics: int) -> type[RubricDraft]:
    """The answer type of one call: at most `max_rubrics` rubrics, each criterion bounded, its meta-class one of
    the declared ones, its rule one of RULES, its points within bounds, so a small model under a grammar can
    neither ramble nor invent a class."""
    points = msgspec.Meta(extra_json_schema={"minimum": MIN_POINTS, "maximum": MAX_POINTS})
    rubric = msgspec.defstruct(
        "DraftRubric",
        [
            ("criterion", Annotated[str, prompts.max_chars(MAX_CRITERION_CHARS)]),
            ("points", Annotated[float, points]),
            ("meta_class", prompts.one_of(meta_classes)),
            ("rule", prompts.one_of(RULES)),
        ],
        bases=(DraftRubric,),
        frozen=True,
        kw_only=True,
    )
    return cast(
        type[RubricDraft],
        msgspec.defstruct(
            "RubricDraft",
            [("rubrics", Annotated[list[rubric], _items(max_rubrics)])],  # type: ignore[valid-type]
            bases=(RubricDraft,),
            frozen=True,
            kw_only=True,
        ),
    )


def _items(n: int) -> msgspec.Meta:
    """1 to `n` items, in the schema only (an empty draft is InvalidDraft, not an undecodable answer)."""
    return msgspec.Meta(extra_json_schema={"minItems": 1, "maxItems": n})


# The draft, checked (pure).


def anchors(rubrics: Sequence[Rubric]) -> list[Rubric]:
    """The anchors of a seed or set, in order: a generated set keeps them first, unchanged."""
    return [r for r in rubrics if r.kind == RubricKind.ANCHOR]


class InvalidDraft(Exception):
    """The draft held no rubric that keeps the rules."""


@dataclass(frozen=True)
class Drafted:
    rubrics: list[Rubric]  # the anchors, then the generated rubrics kept
    dropped: list[str] = field(default_factory=list)  # each rubric left out, and why


def build(draft: RubricDraft, anchors: Sequence[Rubric], meta_classes: Sequence[str], max_rubrics: int) -> Drafted:
    """The anchors and the draft's valid rubrics (adaptive, ids unique); each other one is dropped with a reason.

    Raise InvalidDraft when none is valid."""
    taken = {r.id for r in anchors}
    seen = {normal(r.criterion) for r in anchors}
    kept: list[Rubric] = []
    dropped: list[str] = []
    for n, d in enumerate(draft.rubrics, 1):
        criterion = _phrased(d.criterion)
        reason = _problem(d, criterion, meta_classes)
        if reason is None and normal(criterion) in seen:
            reason = "repeats an earlier criterion"
        if reason is None and len(kept) >= max_rubrics:
            reason = f"over generate_max_rubrics={max_rubrics}"
        if reason is not None:
            dropped.append(f"rubric {n} ({d.criterion[:60]!r}): {reason}")
            continue
        seen.add(normal(criterion))
        rubric_id = new_id(criterion, taken)
        taken.add(rubric_id)
        rule = cast(Literal["hard_rule", "principle"], d.rule)
        kept.append(
            Rubric(
                id=rubric_id,
                criterion=criterion,
                points=d.points,
                meta_class=d.meta_class,
                kind=RubricKind.ADAPTIVE,
                rule=rule,
            )
        )
    if not kept:
        raise InvalidDraft("the draft held no valid rubric" + (f": {'; '.join(dropped)}" if dropped else ""))
    return Drafted([*anchors, *kept], dropped)


def _phrased(criterion: str) -> str:
    """The criterion, stripped, its leading "the response" capitalized."""
    text = " ".join(criterion.split())
    if text.lower().startswith(PHRASE.lower()):
        text = PHRASE + text[len(PHRASE) :]
    return text


def _problem(d: DraftRubric, criterion: str, meta_classes: Sequence[str]) -> str | None:
    if not criterion.startswith(PHRASE + " ") or len(criterion) <= len(PHRASE) + 3:
        return f"not phrased {PHRASE!r} + a criterion"
    if not MIN_POINTS <= d.points <= MAX_POINTS or d.points == 0:
        return f"points {d.points:g} outside [{MIN_POINTS:g}, {MAX_POINTS:g}] (or zero)"
    if d.meta_class not in meta_classes:
        return f"meta_class {d.meta_class!r} is not declared {list(meta_classes)}"
    if d.rule not in RULES:
        return f"rule {d.rule!r} is not one of {list(RULES)}"
    return None


# The prompt (pure).


class _Prompt(msgspec.Struct, frozen=True, omit_defaults=True):
    prompt: str
    reference: str | None = None


def messages(
    template: str,
    prompted: Prompted,
    anchors: Sequence[Rubric],
    meta_classes: Sequence[str],
    max_rubrics: int,
    prompt_chars: int | None = None,
) -> list[dict[str, str]]:
    """The generator's chat: instructions, then the limits, the anchors already in the set and the prompt (with
    its reference, if any) as data; with `prompt_chars` (the agent's prompt budget) the prompt's texts are cut to
    fit (prompts.fit: a marker says where)."""
    parts = [
        prompts.block(
            "limits",
            {
                "max_rubrics": max_rubrics,
                "min_points": MIN_POINTS,
                "max_points": MAX_POINTS,
                "meta_classes": list(meta_classes),
                "rules": list(RULES),
            },
        ),
        prompts.block("anchors", [{"criterion": r.criterion, "points": r.points} for r in anchors]),
    ]
    texts = [prompted.prompt, prompted.reference or ""]
    if prompt_chars is not None:
        budget = prompt_chars - len(template) - sum(map(len, parts)) - _FRAME_CHARS
        texts = prompts.fit(texts, max(budget, _FRAME_CHARS))
    parts.append(prompts.block("prompt", _Prompt(texts[0], texts[1] or None)))
    return [{"role": "system", "content": template.rstrip()}, {"role": "user", "content": "\n".join(parts)}]


# Generating once per instance, across processes.


@dataclass(frozen=True)
class Generated:
    """The rubric set a rollout of a generating instance is judged with, and how it came about."""

    set: RubricSet
    status: Generation | None  # None: a set not written by the generator (predefined, imported, updated)
    error: str | None = None  # the failed generation's, with status fallback


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
    lock_s: float = 10.0
    prompt_chars: int | None = None
    events_maxlen: int = 100_000

    def __post_init__(self) -> None:
        self.store = RubricStore(self.redis, self.keys)
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
        asked = messages(self.template, prompted, first, self.meta_classes, self.max_rubrics, self.prompt_chars)
        try:
            answer = await self.ask(prompted.run_id, GENERATOR, asked, draft_type(self.meta_classes, self.max_rubrics))
            draft = msgspec.convert(msgspec.to_builtins(answer), RubricDraft)  # the shared types, not the call's
            drafted = build(draft, first, self.meta_classes, self.max_rubrics)
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
        await self.redis.xadd(self.keys.events, wire.entry(event), maxlen=self.events_maxlen, approximate=True)


def _settled(current: RubricSet | None, failure: Failure | None) -> bool:
    """Whether the stored set stays: a generated one, or one that no failed generation waits to replace (the
    updater's later versions, a predefined or imported set)."""
    return current is not None and (current.generated_by is not None or failure is None)


def _stored(current: RubricSet | None) -> Generated:
    assert current is not None
    return Generated(current, "generated" if current.generated_by is not None else None)


def generator(settings: ServiceSettings, clients: Clients, service: str) -> Generator:
    """A service's generator: the `generator` agent through the gateway, each call added to its run's usage."""
    assert isinstance(settings, GeneratorSettings)
    agent = settings.agent(GENERATOR)
    return Generator(
        clients.redis,
        clients.keys,
        usage.Metered(clients.gateway, clients.redis, clients.keys).structured,
        template=prompts.load(__package__, GENERATOR, settings.generator_prompt),
        model=agent.model,
        meta_classes=tuple(settings.meta_classes),
        max_rubrics=settings.generate_max_rubrics,
        lock_s=settings.generation_lock_s,
        prompt_chars=agent.prompt_chars(),
        events_maxlen=settings.stream_maxlen,
        service=service,
    )
