"""The rubric set in force for each run (and instance), read from Redis once per process.

Plain async Python: a test hands in a store and seeds and needs no broker.
"""

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from rubricd.messages import Candidate, Event, EventKind, Rubric, RubricSet, RubricsUpdated, instance_key
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.runtime import events
from rubricd_services.state.rubric_sets import RubricStore

T = TypeVar("T")


class Prompted(Protocol):
    """What the rubric set of a prompt is found by: a Rollout, a Comparison."""

    @property
    def run_id(self) -> str: ...
    @property
    def step(self) -> int: ...
    @property
    def prompt(self) -> str: ...
    @property
    def reference(self) -> str | None: ...
    @property
    def instance_key(self) -> str | None: ...


Generation = Literal["generated", "fallback"]  # a generated set: the generator's, or the seed after it failed


@dataclass(frozen=True)
class Generated:
    """The rubric set a rollout of a generating instance is judged with, and how it came about."""

    set: RubricSet
    status: Generation | None  # None: a set not written by the generator (predefined, imported, updated)
    error: str | None = None  # the failed generation's, with status fallback


class Generates(Protocol):
    """What the cache asks of a rubric generator (rubrics.generation.Generator)."""

    async def rubric_set(self, prompted: Prompted, instance_key: str, seed: Sequence[Rubric]) -> Generated: ...


@dataclass(frozen=True)
class InForce:
    """A run's (or instance's) rubric set in force, and how it came to be."""

    set: RubricSet
    generation: Generation | None = None  # rubric generation: the set is the generator's, or the fallback
    generation_error: str | None = None  # a failed generation's (with generation fallback)
    candidate: Candidate | None = None  # promotion gated: a candidate set in shadow on this one


class RubricCache(Generic[T]):
    """The set in force per run (and instance), prepared once for its user (`prepare`: the scorer's judge prompt,
    the comparer's pairwise prompt).

    An entry is re-read when a RubricsUpdated names it (`invalidate`) and when a prompt of a later step arrives,
    so a trainer that waits for step s's rubrics before publishing step s+1 always gets them (and a candidate set
    put in shadow at step s). A run without
    rubrics is seeded from configuration; with a `generator`, a new instance without a predefined set gets the
    generator's rubrics, one load for all the instance's concurrent prompts in this process. A fallback (a failed
    generation) is kept for the rest of its step: a later step's prompt re-reads, and so retries.
    """

    def __init__(
        self,
        store: RubricStore,
        seeds: Seeds,
        per_instance: bool,
        prepare: Callable[[InForce], T],
        generator: Generates | None = None,
    ) -> None:
        self.store = store
        self.seeds = seeds
        self.per_instance = per_instance
        self.prepare = prepare
        self.generator = generator if per_instance else None
        # (run, instance) -> (the newest step it was checked against Redis for, the prepared set)
        self._entries: dict[tuple[str, str | None], asyncio.Future[tuple[int, T]]] = {}

    def key(self, prompted: Prompted) -> tuple[str, str | None]:
        return prompted.run_id, instance_key(prompted) if self.per_instance else None

    async def get(self, prompted: Prompted) -> T:
        """The prepared set in force for a prompt (a rollout, a comparison)."""
        key = self.key(prompted)
        entry = self._entries.get(key)
        if entry is not None and entry.done() and (entry.exception() or entry.result()[0] < prompted.step):
            entry = None
        if entry is None:
            entry = self._entries[key] = asyncio.ensure_future(self._load(prompted, *key))
        return (await asyncio.shield(entry))[1]

    def invalidate(self, run_id: str, instance_key: str | None) -> bool:
        """Forget the set of a run (and instance); True if it was cached."""
        return self._entries.pop((run_id, instance_key), None) is not None

    def reload(self, update: RubricsUpdated | Candidate, service: str, user: str) -> Event | None:
        """Forget the set `update` replaces, or the one a candidate is put in shadow on or rejected from; the
        `rubrics_reloaded` event saying so (`service`'s, its next `user`, a rollout or a comparison, loads the
        set anew), or None where this process had not cached it."""
        if not self.invalidate(update.run_id, update.instance_key):
            return None
        if isinstance(update, Candidate):
            done = "rejected" if update.decision is not None else "in shadow"
            version, detail = update.base_version, f"the candidate of step {update.step} {done} from the next {user}"
        else:
            version, detail = (
                update.version,
                f"v{update.version} replaces v{update.previous_version} from the next {user}",
            )
        return events.event(
            service,
            EventKind.RUBRICS_RELOADED,
            run_id=update.run_id,
            step=update.step,
            detail=detail,
            instance_key=update.instance_key,
            version=version,
        )

    async def _load(self, prompted: Prompted, run_id: str, instance_key: str | None) -> tuple[int, T]:
        current: RubricSet | None
        candidate: Candidate | None = None
        if self.generator is not None and instance_key is not None and instance_key not in self.seeds.per_instance:
            generated = await self.generator.rubric_set(prompted, instance_key, self.seeds.rubrics(instance_key))
            current, generation, error = generated.set, generated.status, generated.error
        else:
            (current, candidate), generation, error = await self.store.in_force(run_id, instance_key), None, None
        if current is None:
            rubrics = self.seeds.rubrics(instance_key)
            current = await self.store.seed(
                RubricSet(run_id=run_id, instance_key=instance_key, version=1, rubrics=rubrics)
            )
        return prompted.step, self.prepare(InForce(current, generation, error, candidate))
