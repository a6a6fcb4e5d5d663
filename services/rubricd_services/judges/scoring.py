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

from rubricd.messages import JudgeStatus, Rollout, RubricResult, RubricSet, Score, TurnResult
from rubricd.reward import Policy, Undefined
from rubricd_services.common import prompts
from rubricd_services.rubrics.sets import Generation, InForce

from . import rollouts, trajectories, verdicts
from .caller import Caller, JudgeFailed

# (messages, the verdict type of the rubric list) -> an instance of that type
Judge = Callable[[list[dict[str, str]], type[msgspec.Struct]], Awaitable[msgspec.Struct]]


def judge_by(call: Caller) -> Judge:
    """The judge that asks through `call` (caller.caller)."""

    async def judge(messages: list[dict[str, str]], verdict: type[msgspec.Struct]) -> msgspec.Struct:
        return (await call(messages, verdict)).value

    return judge


TRAJECTORY = "judge-trajectory"  # the judge's instructions for a trajectory: prompts/judge-trajectory.md


@dataclass(frozen=True)
class Call:
    """One judge call of a set: its system message, the rubrics it decides, what of the judge's context window the
    rollout may fill (None: no limit), the answer's type (verdicts.verdict_type), and whether it judges
    trajectories (shown as a transcript, trajectories.py, their reasoning with `reasoning`) or text rollouts."""

    system: str
    ids: tuple[str, ...]
    rollout_chars: int | None
    verdict: type[msgspec.Struct]
    trajectory: bool = False
    reasoning: bool = False

    def messages(self, rollout: Rollout) -> list[dict[str, str]]:
        if self.trajectory:
            return trajectories.messages(self.system, rollout, self.rollout_chars, self.reasoning)
        return rollouts.messages(self.system, rollout, self.rollout_chars)


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
    trajectory_calls: tuple[Call, ...] = ()  # empty: one call of every rubric, with the default instructions

    # Derived once per cached set, not per rollout (cached_property writes past the frozen __setattr__).
    @functools.cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.set.rubrics)

    @functools.cached_property
    def judged_by(self) -> tuple[Call, ...]:
        """The calls that judge the set."""
        return self.calls or (Call(self.system, self.ids, self.rollout_chars, verdicts.verdict_type(self.ids)),)

    @functools.cached_property
    def trajectory_judged_by(self) -> tuple[Call, ...]:
        """The calls that judge the set on a trajectory."""
        if self.trajectory_calls:
            return self.trajectory_calls
        template = prompts.load(__package__ or "", TRAJECTORY)
        return (_call(template, self.set, None, verdicts.ALL_AT_ONCE, trajectory=True),)

    @functools.cached_property
    def points(self) -> dict[str, float]:
        return {r.id: r.points for r in self.set.rubrics}

    def judging(self, rollout: Rollout) -> tuple[Call, ...]:
        """The calls that judge `rollout`: the trajectory's, or the text's."""
        return self.trajectory_judged_by if rollout.trajectory else self.judged_by


def _call(
    template: str,
    rubric_set: RubricSet,
    prompt_chars: int | None,
    style: verdicts.Style,
    trajectory: bool = False,
    reasoning: bool = False,
) -> Call:
    ids = tuple(r.id for r in rubric_set.rubrics)
    if not trajectory:
        system = rollouts.system_message(template, rubric_set)
        verdict = verdicts.verdict_type(ids, style.explain)
        return Call(system, ids, rollouts.rollout_chars(system, prompt_chars), verdict)
    system = trajectories.system_message(template, rubric_set)
    turn_ids = frozenset(r.id for r in rubric_set.rubrics if r.scope == "turn")
    verdict = verdicts.verdict_type(ids, style.explain, turn_ids)
    return Call(system, ids, trajectories.rollout_chars(system, prompt_chars), verdict, True, reasoning)


def preparer(
    template: str,
    prompt_chars: int | None,
    style: verdicts.Style = verdicts.ALL_AT_ONCE,
    trajectory_template: str | None = None,
    reasoning: bool = False,
) -> Callable[[InForce], Rubrics]:
    """How the rubric cache prepares a set for the judge, once per set: its system messages (`template` for text
    rollouts, `trajectory_template` for trajectories, default prompts/judge-trajectory.md), what of the judge's
    context window (`prompt_chars`, LLMSettings.prompt_chars) a rollout may fill, and its calls in `style`;
    `reasoning`: show a trajectory's reasoning to the judge."""
    for_trajectories = trajectory_template or prompts.load(__package__ or "", TRAJECTORY)

    def calls(rubric_set: RubricSet, trajectory: bool) -> tuple[Call, ...]:
        text = for_trajectories if trajectory else template
        if style.calls == "one":
            return (_call(text, rubric_set, prompt_chars, style, trajectory, reasoning),)
        each = [msgspec.structs.replace(rubric_set, rubrics=[r]) for r in rubric_set.rubrics]
        return tuple(_call(text, one, prompt_chars, style, trajectory, reasoning) for one in each)

    def prepare(in_force: InForce) -> Rubrics:
        whole = _call(template, in_force.set, prompt_chars, style)
        generated = (in_force.generation, in_force.generation_error)
        text, trajectory = calls(in_force.set, False), calls(in_force.set, True)
        return Rubrics(in_force.set, whole.system, whole.rollout_chars, *generated, text, trajectory)

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
        decided = await _judged(rollout, rubrics, call_judge, messages)
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
            RubricResult(
                rubric_id=r.id,
                met=decided[r.id].met,
                points=r.points,
                explanation=decided[r.id].explanation,
                met_turns=list(decided[r.id].met_turns),
                unmet_turns=list(decided[r.id].unmet_turns),
            )
            for r in rubrics.set.rubrics
        ],
        turns=turn_results(rollout, rubrics.set, decided),
        judge_ms=_ms(started),
        scored_at=time.time(),
    )


def turn_results(rollout: Rollout, rubric_set: RubricSet, decided: dict[str, verdicts.Decided]) -> list[TurnResult]:
    """One result per policy turn of a trajectory judged with turn rubrics (none otherwise): the points of the
    turn rubrics it meets, and which it meets and fails."""
    scoped = [r for r in rubric_set.rubrics if r.scope == "turn"]
    if not (rollout.trajectory and scoped):
        return []
    results = []
    for turn in rollout.policy_turns:
        met = [r for r in scoped if turn in decided[r.id].met_turns]
        unmet = [r.id for r in scoped if turn in decided[r.id].unmet_turns]
        results.append(TurnResult(turn=turn, points=sum(r.points for r in met), met=[r.id for r in met], unmet=unmet))
    return results


async def _judged(
    rollout: Rollout, rubrics: Rubrics, call_judge: Judge, messages: list[dict[str, str]] | None
) -> dict[str, verdicts.Decided]:
    """Every rubric's verdict: one call's, or the calls' made at once (the first to fail cancels the others)."""
    calls, turns = rubrics.judging(rollout), rollout.policy_turns

    async def ask(c: Call, given: list[dict[str, str]] | None = None) -> dict[str, verdicts.Decided]:
        answer = await call_judge(given or c.messages(rollout), c.verdict)
        return verdicts.read(answer, c.ids, rubrics.points, turns)

    if len(calls) == 1:
        return await ask(calls[0], messages)

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
