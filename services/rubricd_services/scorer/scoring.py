"""Scoring one rollout: the rubric set in force, one judge call, the reward.

Plain async Python: a test hands in a rubric store and a judge function and
needs no broker.
"""

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from rubricd.messages import JudgeStatus, Rollout, RubricResult, RubricSet, Score, instance_key
from rubricd.reward import Policy, Undefined
from rubricd.store import RubricStore
from rubricd_services.common.seeds import Seeds

from . import judge

if TYPE_CHECKING:
    from .generate import Generation, Generator

# (messages, the verdict type of the rubric list) -> an instance of that type
Judge = Callable[[list[dict[str, str]], type[msgspec.Struct]], Awaitable[msgspec.Struct]]


class Prompted(Protocol):
    """What the rubric set of a prompt is found by (RubricCache.get): a Rollout, a Comparison."""

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


class JudgeFailed(Exception):
    """The judge gave no usable verdict (after its own retries)."""


@dataclass(frozen=True)
class Rubrics:
    """A rubric set ready to judge with: the set and its system message."""

    set: RubricSet
    system: str
    step: int  # the newest rollout step this entry was checked against Redis for
    rollout_chars: int | None = None  # what of the judge's context window the rollout may fill (None: no limit)
    generation: "Generation | None" = None  # rubric generation: the set is the generator's, or the fallback
    generation_error: str | None = None  # a failed generation's (with generation fallback)

    # Derived once per cached set, not per rollout (cached_property writes past the frozen __setattr__).
    @functools.cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.set.rubrics)

    @functools.cached_property
    def verdict(self) -> type[msgspec.Struct]:
        """The judge's answer type for this set (judge.verdict_type)."""
        return judge.verdict_type(self.ids)


class RubricCache:
    """The rubric set in force for each run (and instance), read from Redis once.

    An entry is re-read when a RubricsUpdated names it (`invalidate`) and when
    a rollout of a later step arrives, so a trainer that waits for step s's
    rubrics before publishing step s+1 always gets them. A run without rubrics
    is seeded from configuration; with a `generator`, a new instance without a
    predefined set gets the generator's rubrics (scorer.generate), one load for
    all the instance's concurrent rollouts in this process. A fallback (a failed
    generation) is kept for the rest of its step: a later step's rollout
    re-reads, and so retries.
    """

    def __init__(
        self,
        store: RubricStore,
        seeds: Seeds,
        template: str,
        per_instance: bool,
        prompt_chars: int | None = None,
        generator: "Generator | None" = None,
    ) -> None:
        """`prompt_chars`: the judge's prompt budget (LLMSettings.prompt_chars); a rollout is cut to fit it."""
        self.store = store
        self.seeds = seeds
        self.template = template
        self.per_instance = per_instance
        self.prompt_chars = prompt_chars
        self.generator = generator if per_instance else None
        self._entries: dict[tuple[str, str | None], asyncio.Future[Rubrics]] = {}

    def key(self, prompted: Prompted) -> tuple[str, str | None]:
        return prompted.run_id, instance_key(prompted) if self.per_instance else None

    async def get(self, prompted: Prompted) -> Rubrics:
        """The set in force for a rollout (or anything else carrying run, step, prompt and instance key)."""
        key = self.key(prompted)
        entry = self._entries.get(key)
        if entry is not None and entry.done() and (entry.exception() or entry.result().step < prompted.step):
            entry = None
        if entry is None:
            entry = self._entries[key] = asyncio.ensure_future(self._load(prompted, *key))
        return await asyncio.shield(entry)

    def invalidate(self, run_id: str, instance_key: str | None) -> bool:
        """Forget the set of a run (and instance); True if it was cached."""
        return self._entries.pop((run_id, instance_key), None) is not None

    async def _load(self, prompted: Prompted, run_id: str, instance_key: str | None) -> Rubrics:
        current: RubricSet | None
        generation: Generation | None = None
        error: str | None = None
        if self.generator is not None and instance_key is not None and instance_key not in self.seeds.per_instance:
            generated = await self.generator.rubric_set(prompted, instance_key, self.seeds.rubrics(instance_key))
            current, generation, error = generated.set, generated.status, generated.error
        else:
            current = await self.store.current(run_id, instance_key)
        if current is None:
            rubrics = self.seeds.rubrics(instance_key)
            seed = RubricSet(run_id=run_id, instance_key=instance_key, version=1, rubrics=rubrics)
            current = await self.store.seed(seed)
        system = judge.system_message(self.template, current)
        return Rubrics(
            current, system, prompted.step, judge.rollout_chars(system, self.prompt_chars), generation, error
        )


async def score_rollout(
    rollout: Rollout,
    rubrics: Rubrics,
    call_judge: Judge,
    policy: Policy,
    policy_name: str,
    *,
    active: str | None = None,
    undefined: Undefined = "weighted_total",
) -> Score:
    """Judge `rollout` against `rubrics` and turn the verdict into a Score.

    A judge that fails yields status judge_failed and no reward, never a 0. `active` and `undefined` go to the
    policy (rubricd.reward: the step's meta-class under `alternating`).
    """
    started = time.perf_counter()
    base: dict[str, Any] = {
        "run_id": rollout.run_id,
        "rollout_id": rollout.rollout_id,
        "step": rollout.step,
        "instance_key": rubrics.set.instance_key,
        "rubric_version": rubrics.set.version,
        "policy": policy_name,
        "active_meta_class": active,
        "rubrics_generation": rubrics.generation,
        "rubrics_generation_error": rubrics.generation_error,
        "evaluation": rollout.evaluation,
    }
    try:
        verdict = await call_judge(judge.messages(rubrics.system, rollout, rubrics.rollout_chars), rubrics.verdict)
    except JudgeFailed as e:
        return Score(
            **base,
            status=JudgeStatus.JUDGE_FAILED,
            reward=None,
            error=str(e),
            judge_ms=_ms(started),
            scored_at=time.time(),
        )
    decided = judge.verdicts(verdict, rubrics.ids)
    met = {rubric_id: v.met for rubric_id, v in decided.items()}
    reward = policy(rubrics.set.rubrics, met, active=active, undefined=undefined)
    return Score(
        **base,
        status=JudgeStatus.OK,
        reward=reward.total,
        weighted_total=reward.weighted_total,
        meta_class_scores={c: v for c, v in reward.meta_class_scores.items() if v is not None},
        undefined_meta_classes=[c for c, v in reward.meta_class_scores.items() if v is None],
        masked=reward.masked,
        results=[
            RubricResult(rubric_id=r.id, met=decided[r.id].met, points=r.points, explanation=decided[r.id].explanation)
            for r in rubrics.set.rubrics
        ],
        judge_ms=_ms(started),
        scored_at=time.time(),
    )


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
