"""Judging rollouts into Scores: one rollout alone (one judge call against the rubric set in force, or one per
rubric), or a sample group together (groups.py); either by one call or by votes (votes.py).

Plain async Python: a test hands in a rubric set and a judge function and
needs no broker.
"""

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import msgspec

from rubricd.messages import GroupJudged, JudgeStatus, Rollout, RubricResult, RubricSet, Score, TurnResult
from rubricd.reward import Policy, Undefined
from rubricd_services.common import prompts
from rubricd_services.rubrics.sets import Generation, InForce

from . import groups, rollouts, trajectories, verdicts
from .caller import Caller, JudgeFailed
from .votes import Voted, majority

T = TypeVar("T")

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
    group_calls: tuple[groups.GroupCall, groups.GroupCall] | None = None  # (text, trajectory); None: the defaults
    remake: Callable[[RubricSet, bool], tuple[Call, ...]] | None = None  # the calls of the set in another order

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

    def judging(self, rollout: Rollout, vote: int = 0) -> tuple[Call, ...]:
        """The calls that judge `rollout`: the trajectory's, or the text's; a later `vote` lists the rubrics turned
        by `vote` places, so each vote sees every rubric at another position."""
        turn = vote % len(self.set.rubrics) if self.set.rubrics else 0
        if turn == 0 or self.remake is None:
            return self.trajectory_judged_by if rollout.trajectory else self.judged_by
        turned = [*self.set.rubrics[turn:], *self.set.rubrics[:turn]]
        return self.remake(msgspec.structs.replace(self.set, rubrics=turned), bool(rollout.trajectory))

    @functools.cached_property
    def grouped_by(self) -> tuple[groups.GroupCall, groups.GroupCall]:
        """The calls that judge a group of the set: (text, trajectory)."""
        if self.group_calls is not None:
            return self.group_calls
        template = prompts.load(__package__ or "", groups.GROUP)
        text, trajectory = (
            groups.group_call(template, self.set, None, True, groups.MAX_MEMBERS, t) for t in (False, True)
        )
        return text, trajectory

    def grouping(self, rollout: Rollout) -> groups.GroupCall:
        """The call that judges `rollout`'s group (a trajectory's or a text's)."""
        return self.grouped_by[bool(rollout.trajectory)]


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
    group_template: str | None = None,
    group_members: int = groups.MAX_MEMBERS,
    answer_tokens: int | None = None,
) -> Callable[[InForce], Rubrics]:
    """How the rubric cache prepares a set for the judge, once per set: its system messages (`template` for text
    rollouts, `trajectory_template` for trajectories, default prompts/judge-trajectory.md, `group_template` for
    groups, default prompts/judge-group.md), what of the judge's context window (`prompt_chars`,
    LLMSettings.prompt_chars) a rollout (a group) may fill, and its calls in `style` (a group: every rubric in
    one call, at most `group_members` responses and as many as the judge's answer, `answer_tokens`, holds the
    verdicts of); `reasoning`: show a trajectory's reasoning to the judge."""
    for_trajectories = trajectory_template or prompts.load(__package__ or "", TRAJECTORY)
    for_groups = group_template or prompts.load(__package__ or "", groups.GROUP)

    def calls(rubric_set: RubricSet, trajectory: bool) -> tuple[Call, ...]:
        text = for_trajectories if trajectory else template
        if style.calls == "one":
            return (_call(text, rubric_set, prompt_chars, style, trajectory, reasoning),)
        each = [msgspec.structs.replace(rubric_set, rubrics=[r]) for r in rubric_set.rubrics]
        return tuple(_call(text, one, prompt_chars, style, trajectory, reasoning) for one in each)

    def group_call(rubric_set: RubricSet, trajectory: bool) -> groups.GroupCall:
        return groups.group_call(
            for_groups, rubric_set, prompt_chars, style.explain, group_members, trajectory, reasoning, answer_tokens
        )

    def prepare(in_force: InForce) -> Rubrics:
        whole = _call(template, in_force.set, prompt_chars, style)
        generated = (in_force.generation, in_force.generation_error)
        text, trajectory = calls(in_force.set, False), calls(in_force.set, True)
        grouped = (group_call(in_force.set, False), group_call(in_force.set, True))
        return Rubrics(in_force.set, whole.system, whole.rollout_chars, *generated, text, trajectory, grouped, calls)

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
    votes: int = 1,
) -> Score:
    """Judge `rollout` against `rubrics` and turn the verdict into a Score.

    A judge that fails (any of its calls) yields status judge_failed and no reward, never a 0. `active` and
    `undefined` go to the policy (rubricd.reward: the step's meta-class under `alternating`); `messages`: the
    judge's, where the caller built them already (a set judged in one call); `votes`: judge calls whose majority
    decides each rubric (votes.py), each later one with the rubrics in another order.
    """
    started = time.perf_counter()
    scoring = Scoring(rubrics, policy, policy_name, active, undefined)
    try:
        voted = majority(await _all([_judged(rollout, rubrics, call_judge, messages, v) for v in range(votes)]))
    except JudgeFailed as e:
        return scoring.failed(rollout, str(e), started)
    return scoring.scored(rollout, voted, started, votes)


async def score_group(
    members: Sequence[Rollout],
    rubrics: Rubrics,
    call_judge: Judge,
    policy: Policy,
    policy_name: str,
    *,
    group: str,
    active: str | None = None,
    undefined: Undefined = "weighted_total",
    votes: int = 1,
) -> list[Score]:
    """Judge the members of one sample group together (they share the prompt, hence `rubrics`): each sub-group
    the judge's budget allows in one call per vote, its members shown in an order shuffled per group and turned per vote; a member
    alone in its sub-group is judged as `score_rollout` judges. Members with the same response are judged once
    and share its verdicts (as the verdict cache shares them in single judging). One Score per member, in order;
    a failed call fails the scores of its sub-group only."""
    firsts: dict[bytes, int] = {}
    first_of = [firsts.setdefault(groups.response_of(m), i) for i, m in enumerate(members)]
    distinct = sorted(firsts.values())
    unique = [members[i] for i in distinct]  # what the judge sees: every response once
    scoring = Scoring(rubrics, policy, policy_name, active, undefined)
    call = rubrics.grouping(unique[0])

    async def judge(sub: list[int]) -> list[Score]:
        started = time.perf_counter()
        subset = [unique[i] for i in sub]
        if len(subset) == 1:
            return [
                await score_rollout(
                    subset[0], rubrics, call_judge, policy, policy_name, active=active, undefined=undefined, votes=votes
                )
            ]
        seed = f"{group}/{sub[0]}"
        shown = [groups.order(seed, v, len(subset)) for v in range(votes)]
        turns = [m.policy_turns for m in subset]

        async def vote(v: int) -> list[dict[str, verdicts.Decided]]:
            answer = await call_judge(call.messages(subset, shown[v]), call.verdict(len(subset)))
            return groups.read(answer, len(subset), call.ids, rubrics.points, turns, shown[v])

        try:
            decided = await _all([vote(v) for v in range(votes)])
        except JudgeFailed as e:
            return [scoring.failed(m, str(e), started) for m in subset]
        scores = []
        for i, member in enumerate(subset):
            positions = [order.index(i) for order in shown]
            judged = GroupJudged(members=len(subset), label=groups.LABELS[positions[0]], positions=positions)
            voted = majority([by_vote[i] for by_vote in decided])
            scores.append(scoring.scored(member, voted, started, votes, judged))
        return scores

    subs = call.sub_groups(unique)
    judged = await asyncio.gather(*(judge(sub) for sub in subs))
    by_first = {
        distinct[i]: score
        for sub, scores in zip(subs, judged, strict=True)
        for i, score in zip(sub, scores, strict=True)
    }
    return [
        by_first[i]
        if i == first
        else msgspec.structs.replace(by_first[first], rollout_id=m.rollout_id, evaluation=m.evaluation)
        for i, (m, first) in enumerate(zip(members, first_of, strict=True))
    ]


@dataclass(frozen=True)
class Scoring:
    """How verdicts become a Score under a set and a policy (`active`, `undefined`: rubricd.reward)."""

    rubrics: Rubrics
    policy: Policy
    policy_name: str
    active: str | None
    undefined: Undefined

    def base(self, rollout: Rollout) -> dict[str, Any]:
        return {
            "run_id": rollout.run_id,
            "rollout_id": rollout.rollout_id,
            "step": rollout.step,
            "instance_key": self.rubrics.set.instance_key,
            "rubric_version": self.rubrics.set.version,
            "policy": self.policy_name,
            "active_meta_class": self.active,
            "rubrics_generation": self.rubrics.generation,
            "rubrics_generation_error": self.rubrics.generation_error,
            "evaluation": rollout.evaluation,
            "group": rollout.group,
        }

    def failed(self, rollout: Rollout, error: str, started: float) -> Score:
        """A judge that failed: no reward, never a 0."""
        return Score(
            **self.base(rollout),
            status=JudgeStatus.JUDGE_FAILED,
            reward=None,
            error=error,
            judge_ms=_ms(started),
            scored_at=time.time(),
        )

    def scored(
        self, rollout: Rollout, voted: Voted, started: float, votes: int = 1, grouping: GroupJudged | None = None
    ) -> Score:
        rubric_set, decided = self.rubrics.set, voted.decided
        met = {rubric_id: v.met for rubric_id, v in decided.items()}
        reward = self.policy(rubric_set.rubrics, met, active=self.active, undefined=self.undefined)
        return Score(
            **self.base(rollout),
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
                    agreement=voted.agreement[r.id] if votes > 1 else None,
                )
                for r in rubric_set.rubrics
            ],
            turns=turn_results(rollout, rubric_set, decided),
            judge_ms=_ms(started),
            scored_at=time.time(),
            grouping=grouping,
            votes=votes,
            agreement=round(voted.mean_agreement, 6) if votes > 1 else None,
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
    rollout: Rollout, rubrics: Rubrics, call_judge: Judge, messages: list[dict[str, str]] | None, vote: int = 0
) -> dict[str, verdicts.Decided]:
    """Every rubric's verdict in `vote`: one call's, or the calls' made at once (the first to fail cancels the
    others); `messages` are the first vote's, where given."""
    calls, turns = rubrics.judging(rollout, vote), rollout.policy_turns

    async def ask(c: Call, given: list[dict[str, str]] | None = None) -> dict[str, verdicts.Decided]:
        answer = await call_judge(given or c.messages(rollout), c.verdict)
        return verdicts.read(answer, c.ids, rubrics.points, turns)

    if len(calls) == 1:
        return await ask(calls[0], messages if vote == 0 else None)
    return {k: v for asked in await _all([ask(c) for c in calls]) for k, v in asked.items()}


async def _all(asks: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """The results of `asks`, made at once; the first to fail with JudgeFailed cancels the others and is raised."""
    if len(asks) == 1:
        return [await asks[0]]
    failed: JudgeFailed | None = None
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(ask) for ask in asks]
    except* JudgeFailed as e:
        failed = cast(JudgeFailed, e.exceptions[0])
    if failed is not None:
        raise failed
    return [task.result() for task in tasks]


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
