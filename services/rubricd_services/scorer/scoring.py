"""Scoring one rollout: one judge call against the rubric set in force, the reward.

Plain async Python: a test hands in a rubric set and a judge function and
needs no broker.
"""

import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from rubricd.messages import JudgeStatus, Rollout, RubricResult, RubricSet, Score
from rubricd.reward import Policy, Undefined
from rubricd_services.rubrics.sets import InForce

from . import judge

if TYPE_CHECKING:
    from rubricd_services.rubrics.generation import Generation

# (messages, the verdict type of the rubric list) -> an instance of that type
Judge = Callable[[list[dict[str, str]], type[msgspec.Struct]], Awaitable[msgspec.Struct]]


class JudgeFailed(Exception):
    """The judge gave no usable verdict (after its own retries)."""


@dataclass(frozen=True)
class Rubrics:
    """A rubric set ready to judge with: the set and its system message."""

    set: RubricSet
    system: str
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


def preparer(template: str, prompt_chars: int | None) -> Callable[[InForce], Rubrics]:
    """How the rubric cache prepares a set for the judge, once per set: its system message, and what of the judge's
    context window (`prompt_chars`, LLMSettings.prompt_chars) a rollout may fill."""

    def prepare(in_force: InForce) -> Rubrics:
        system = judge.system_message(template, in_force.set)
        rollout_chars = judge.rollout_chars(system, prompt_chars)
        return Rubrics(in_force.set, system, rollout_chars, in_force.generation, in_force.generation_error)

    return prepare


async def score_rollout(
    rollout: Rollout,
    rubrics: Rubrics,
    call_judge: Judge,
    policy: Policy,
    policy_name: str,
    *,
    active: str | None = None,
    undefined: Undefined = "weighted_total",
    messages: list[dict[str, str]] | None = None,
) -> Score:
    """Judge `rollout` against `rubrics` and turn the verdict into a Score.

    A judge that fails yields status judge_failed and no reward, never a 0. `active` and `undefined` go to the
    policy (rubricd.reward: the step's meta-class under `alternating`); `messages`: the judge's, where the caller
    built them already.
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
        if messages is None:
            messages = judge.messages(rubrics.system, rollout, rubrics.rollout_chars)
        verdict = await call_judge(messages, rubrics.verdict)
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
