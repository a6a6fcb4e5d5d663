"""Judging one rollout alone: one judge call against the rubric set in force (or one per rubric), the Score.

Plain async Python: a test hands in a rubric set and a judge function and
needs no broker.
"""

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from rubricd.messages import JudgeStatus, Rollout, RubricResult, RubricSet, Score
from rubricd.reward import Policy, Undefined
from rubricd_services.rubrics.sets import Generation, InForce

from . import rollouts, verdicts
from .caller import Caller, JudgeFailed

# (messages, the verdict type of the rubric list) -> an instance of that type
Judge = Callable[[list[dict[str, str]], type[msgspec.Struct]], Awaitable[msgspec.Struct]]


def judge_by(call: Caller) -> Judge:
    """The judge that asks through `call` (caller.caller)."""

    async def judge(messages: list[dict[str, str]], verdict: type[msgspec.Struct]) -> msgspec.Struct:
        return (await call(messages, verdict)).value

    return judge


@dataclass(frozen=True)
class Call:
    """One judge call of a set: its system message, the rubrics it decides, what of the judge's context window the
    rollout may fill (None: no limit), and the answer's type (verdicts.verdict_type)."""

    system: str
    ids: tuple[str, ...]
    rollout_chars: int | None
    verdict: type[msgspec.Struct]


@dataclass(frozen=True)
class Rubrics:
    """A rubric set ready to judge with: the set, its system message, and the calls that judge it (one, or one per
    rubric: verdicts.Style)."""

    set: RubricSet
    system: str
    rollout_chars: int | None = None  # what of the judge's context window the rollout may fill (None: no limit)
    generation: Generation | None = None  # rubric generation: the set is the generator's, or the fallback
    generation_error: str | None = None  # a failed generation's (with generation fallback)
    calls: tuple[Call, ...] = ()  # empty: one call of every rubric, with `system`

    # Derived once per cached set, not per rollout (cached_property writes past the frozen __setattr__).
    @functools.cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.set.rubrics)

    @functools.cached_property
    def judged_by(self) -> tuple[Call, ...]:
        """The calls that judge the set."""
        return self.calls or (Call(self.system, self.ids, self.rollout_chars, verdicts.verdict_type(self.ids)),)


def preparer(
    template: str, prompt_chars: int | None, style: verdicts.Style = verdicts.ALL_AT_ONCE
) -> Callable[[InForce], Rubrics]:
    """How the rubric cache prepares a set for the judge, once per set: its system message, what of the judge's
    context window (`prompt_chars`, LLMSettings.prompt_chars) a rollout may fill, and its calls in `style`."""

    def call(rubric_set: RubricSet) -> Call:
        system = rollouts.system_message(template, rubric_set)
        ids = tuple(r.id for r in rubric_set.rubrics)
        return Call(
            system, ids, rollouts.rollout_chars(system, prompt_chars), verdicts.verdict_type(ids, style.explain)
        )

    def prepare(in_force: InForce) -> Rubrics:
        whole = call(in_force.set)
        each = [msgspec.structs.replace(in_force.set, rubrics=[r]) for r in in_force.set.rubrics]
        calls = (whole,) if style.calls == "one" else tuple(call(one) for one in each)
        generated = (in_force.generation, in_force.generation_error)
        return Rubrics(in_force.set, whole.system, whole.rollout_chars, *generated, calls)

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

    A judge that fails (any of its calls) yields status judge_failed and no reward, never a 0. `active` and
    `undefined` go to the policy (rubricd.reward: the step's meta-class under `alternating`); `messages`: the
    judge's, where the caller built them already (a set judged in one call).
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
        decided = await _judged(rollout, rubrics.judged_by, call_judge, messages)
    except JudgeFailed as e:
        return Score(
            **base,
            status=JudgeStatus.JUDGE_FAILED,
            reward=None,
            error=str(e),
            judge_ms=_ms(started),
            scored_at=time.time(),
        )
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


async def _judged(
    rollout: Rollout, calls: tuple[Call, ...], call_judge: Judge, messages: list[dict[str, str]] | None
) -> dict[str, verdicts.Verdict]:
    """Every rubric's verdict: one call's, or the calls' made at once (the first to fail cancels the others)."""
    if len(calls) == 1:
        [one] = calls
        answer = await call_judge(messages or rollouts.messages(one.system, rollout, one.rollout_chars), one.verdict)
        return verdicts.read(answer, one.ids)

    async def ask(c: Call) -> dict[str, verdicts.Verdict]:
        return verdicts.read(await call_judge(rollouts.messages(c.system, rollout, c.rollout_chars), c.verdict), c.ids)

    failed: JudgeFailed | None = None
    try:
        async with asyncio.TaskGroup() as group:
            asked = [group.create_task(ask(c)) for c in calls]
    except* JudgeFailed as e:
        failed = cast(JudgeFailed, e.exceptions[0])
    if failed is not None:
        raise failed
    return {k: v for task in asked for k, v in task.result().items()}


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
