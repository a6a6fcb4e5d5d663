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

from rubricd.messages import (
    Candidate,
    CandidateScore,
    GroupJudged,
    JudgeStatus,
    Rollout,
    Rubric,
    RubricResult,
    RubricSet,
    Score,
    TurnResult,
)
from rubricd_services.rubrics.policies import Policy, Undefined, policy
from rubricd_services.rubrics.sets import Generation, InForce
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings

from . import groups, pairwise, rollouts, trajectories, verdicts
from .caller import Caller, JudgeFailed
from .settings import JudgeSettings, PairwiseSettings
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


@dataclass(frozen=True, kw_only=True)
class Judging:
    """How rollouts are judged, built once from settings (`of`): the judge's LLM settings (its model, its context
    window: `llm.prompt_chars()`, its answer's tokens: `llm.max_tokens`), its instructions for a text rollout
    (`template`), a trajectory and a group (None: prompts/judge-trajectory.md, prompts/judge-group.md), how it is
    asked (`style`: every rubric in one call or one per rubric, with explanations or not), whether it reads a
    trajectory's reasoning, and the most responses in one group call."""

    llm: LLMSettings
    template: str
    trajectory_template: str | None = None
    group_template: str | None = None
    style: verdicts.Style = verdicts.ALL_AT_ONCE
    reasoning: bool = False
    group_members: int = groups.MAX_MEMBERS

    @classmethod
    def of(cls, settings: JudgeSettings, llm: LLMSettings) -> "Judging":
        """The judging `settings` say, by the judge `llm`; raises OSError if a prompt file cannot be read."""
        package = verdicts.__package__
        return cls(
            llm=llm,
            template=prompts.load(package, verdicts.JUDGE, settings.judge_prompt),
            trajectory_template=prompts.load(package, TRAJECTORY, settings.judge_trajectory_prompt),
            group_template=prompts.load(package, groups.GROUP, settings.judge_group_prompt),
            style=settings.judge_style(),
            reasoning=settings.judge_reasoning,
            group_members=settings.judge_group_members,
        )

    @classmethod
    def pairwise(cls, settings: PairwiseSettings, llm: LLMSettings) -> "Judging":
        """The pairwise judge's (the comparer's, the arm service's): its LLM settings and its prompt."""
        return cls(llm=llm, template=prompts.load(pairwise.__package__, pairwise.PAIRWISE, settings.pairwise_prompt))

    def prepare(self, in_force: InForce) -> "ReadySet":
        """A rubric set ready to judge with (once per set, by the rubric cache); with a candidate in shadow, its
        changed rubrics are judged in the same calls (`shadowed`)."""
        judged = shadowed(in_force.set, in_force.candidate)
        whole = _call(self.template, judged, self.llm.prompt_chars(), self.style)
        return ReadySet(
            in_force.set, whole.system, self, in_force.generation, in_force.generation_error, in_force.candidate
        )

    @functools.cached_property
    def for_trajectories(self) -> str:
        return self.trajectory_template or prompts.load(__package__ or "", TRAJECTORY)

    @functools.cached_property
    def for_groups(self) -> str:
        return self.group_template or prompts.load(__package__ or "", groups.GROUP)

    def calls(self, rubric_set: RubricSet, trajectory: bool) -> tuple[Call, ...]:
        """The calls that judge `rubric_set` (a text rollout, or a trajectory), in `style`."""
        text, chars = (self.for_trajectories if trajectory else self.template), self.llm.prompt_chars()
        if self.style.calls == "one":
            return (_call(text, rubric_set, chars, self.style, trajectory, self.reasoning),)
        each = [msgspec.structs.replace(rubric_set, rubrics=[r]) for r in rubric_set.rubrics]
        return tuple(_call(text, one, chars, self.style, trajectory, self.reasoning) for one in each)

    def group_call(self, rubric_set: RubricSet, trajectory: bool) -> groups.GroupCall:
        """The call that judges a group of `rubric_set`: every rubric in one call, at most `group_members`
        responses and as many as the judge's answer holds the verdicts of."""
        chars, explain, answer_tokens = self.llm.prompt_chars(), self.style.explain, self.llm.max_tokens
        return groups.group_call(
            self.for_groups, rubric_set, chars, explain, self.group_members, trajectory, self.reasoning, answer_tokens
        )


def shadowed(rubric_set: RubricSet, candidate: Candidate | None) -> RubricSet:
    """What the judge is asked about: the set, and a candidate's changed rubrics under their shadow ids after it
    (Candidate.shadows); the set alone without one."""
    if candidate is None:
        return rubric_set
    return msgspec.structs.replace(rubric_set, rubrics=[*rubric_set.rubrics, *candidate.shadows()])


@dataclass(frozen=True)
class ReadySet:
    """A rubric set ready to judge with: the set, its system message, and the calls that judge it, made by
    `judging` (None: the default prompts, every rubric in one call, no context budget). With a `candidate` in
    shadow, the calls judge its changed rubrics too (`judged`); the set alone makes the reward."""

    set: RubricSet
    system: str
    judging: Judging | None = None
    generation: Generation | None = None  # rubric generation: the set is the generator's, or the fallback
    generation_error: str | None = None  # a failed generation's (with generation fallback)
    candidate: Candidate | None = None

    # Derived once per cached set, not per rollout (cached_property writes past the frozen __setattr__).
    @functools.cached_property
    def judged(self) -> RubricSet:
        """The rubrics the judge decides: the set's, and the candidate's changed ones under their shadow ids."""
        return shadowed(self.set, self.candidate)

    @functools.cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.judged.rubrics)

    @functools.cached_property
    def ids_in_force(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.set.rubrics)

    @functools.cached_property
    def judged_by(self) -> tuple[Call, ...]:
        """The calls that judge the set."""
        if self.judging is not None:
            return self.judging.calls(self.judged, False)
        return (Call(self.system, self.ids, None, verdicts.verdict_type(self.ids)),)

    @functools.cached_property
    def trajectory_judged_by(self) -> tuple[Call, ...]:
        """The calls that judge the set on a trajectory."""
        if self.judging is not None:
            return self.judging.calls(self.judged, True)
        template = prompts.load(__package__ or "", TRAJECTORY)
        return (_call(template, self.judged, None, verdicts.ALL_AT_ONCE, trajectory=True),)

    @functools.cached_property
    def points(self) -> dict[str, float]:
        return {r.id: r.points for r in self.judged.rubrics}

    def calls(self, rollout: Rollout, vote: int = 0) -> tuple[Call, ...]:
        """The calls that judge `rollout`: the trajectory's, or the text's; a later `vote` lists the rubrics turned
        by `vote` places, so each vote sees every rubric at another position."""
        judged = self.judged.rubrics
        turn = vote % len(judged) if judged else 0
        if turn == 0 or self.judging is None:
            return self.trajectory_judged_by if rollout.trajectory else self.judged_by
        turned = [*judged[turn:], *judged[:turn]]
        return self.judging.calls(msgspec.structs.replace(self.judged, rubrics=turned), bool(rollout.trajectory))

    @functools.cached_property
    def grouped_by(self) -> tuple[groups.GroupCall, groups.GroupCall]:
        """The calls that judge a group of the set: (text, trajectory)."""
        if self.judging is not None:
            return self.judging.group_call(self.judged, False), self.judging.group_call(self.judged, True)
        template = prompts.load(__package__ or "", groups.GROUP)
        text, trajectory = (
            groups.group_call(template, self.judged, None, True, groups.MAX_MEMBERS, t) for t in (False, True)
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


async def score_rollout(rollout: Rollout, scoring: "Scoring", judge: Judge, *, votes: int = 1) -> Score:
    """Judge `rollout` against `scoring.rubrics` and turn the verdict into a Score under its policy.

    A judge that fails (any of its calls) yields status judge_failed and no reward, never a 0. `votes`: judge
    calls whose majority decides each rubric (votes.py), each later one with the rubrics in another order.
    """
    started = time.perf_counter()
    try:
        voted = majority(await _all([_judged(rollout, scoring.rubrics, judge, v) for v in range(votes)]))
    except JudgeFailed as e:
        return scoring.failed(rollout, str(e), started)
    return scoring.scored(rollout, voted, started, votes)


async def score_group(
    members: Sequence[Rollout], scoring: "Scoring", judge: Judge, *, group: str, votes: int = 1
) -> list[Score]:
    """Judge the members of one sample group together (they share the prompt, hence `rubrics`): each sub-group
    the judge's budget allows in one call per vote, its members shown in an order shuffled per group and turned
    per vote; a member alone in its sub-group is judged as `score_rollout` judges. Members with the same response are judged once
    and share its verdicts (as the verdict cache shares them in single judging). One Score per member, in order;
    a failed call fails the scores of its sub-group only."""
    firsts: dict[bytes, int] = {}
    first_of = [firsts.setdefault(groups.response_of(m), i) for i, m in enumerate(members)]
    distinct = sorted(firsts.values())
    unique = [members[i] for i in distinct]  # what the judge sees: every response once
    rubrics = scoring.rubrics
    call = rubrics.grouping(unique[0])

    async def judged_together(sub: list[int]) -> list[Score]:
        started = time.perf_counter()
        subset = [unique[i] for i in sub]
        if len(subset) == 1:
            return [await score_rollout(subset[0], scoring, judge, votes=votes)]
        seed = f"{group}/{sub[0]}"
        shown = [groups.order(seed, v, len(subset)) for v in range(votes)]
        turns = [m.policy_turns for m in subset]

        async def vote(v: int) -> list[dict[str, verdicts.Decided]]:
            answer = await judge(call.messages(subset, shown[v]), call.verdict(len(subset)))
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
    judged = await asyncio.gather(*(judged_together(sub) for sub in subs))
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
    """How verdicts become a Score: under a set (`rubrics`), and the policy named `policy_name` (`active`, the
    step's meta-class under `alternating`, and `undefined`: rubricd_services.rubrics.policies)."""

    rubrics: ReadySet
    policy_name: str
    active: str | None = None
    undefined: Undefined = "weighted_total"

    @functools.cached_property
    def policy(self) -> Policy:
        return policy(self.policy_name)

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
            results=[_result(r, r.id, voted, votes) for r in rubric_set.rubrics],
            turns=turn_results(rollout, rubric_set, decided),
            judge_ms=_ms(started),
            scored_at=time.time(),
            grouping=grouping,
            votes=votes,
            agreement=round(voted.mean_agreement(self.rubrics.ids_in_force), 6) if votes > 1 else None,
            candidate=self.shadow(voted, votes),
        )

    def shadow(self, voted: Voted, votes: int) -> CandidateScore | None:
        """The same verdicts under the candidate in shadow, if any: its changed rubrics' own, the others' kept."""
        candidate = self.rubrics.candidate
        if candidate is None:
            return None
        changed, rubrics = candidate.changed(), candidate.rubrics.rubrics
        met = {r.id: voted.decided[changed.get(r.id, r.id)].met for r in rubrics}
        reward = self.policy(rubrics, met, active=self.active, undefined=self.undefined)
        return CandidateScore(
            step=candidate.step,
            version=candidate.rubrics.version,
            reward=reward.total,
            weighted_total=reward.weighted_total,
            results=[_result(r, changed[r.id], voted, votes) for r in rubrics if r.id in changed],
        )


def _result(rubric: Rubric, judged_as: str, voted: Voted, votes: int) -> RubricResult:
    """The verdict on `rubric`, decided under the id `judged_as`."""
    decided = voted.decided[judged_as]
    return RubricResult(
        rubric_id=rubric.id,
        met=decided.met,
        points=rubric.points,
        explanation=decided.explanation,
        met_turns=list(decided.met_turns),
        unmet_turns=list(decided.unmet_turns),
        agreement=voted.agreement[judged_as] if votes > 1 else None,
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


async def _judged(rollout: Rollout, rubrics: ReadySet, judge: Judge, vote: int = 0) -> dict[str, verdicts.Decided]:
    """Every rubric's verdict in `vote`: one call's, or the calls' made at once (the first to fail cancels the
    others)."""
    calls, turns = rubrics.calls(rollout, vote), rollout.policy_turns

    async def ask(c: Call) -> dict[str, verdicts.Decided]:
        answer = await judge(c.messages(rollout), c.verdict)
        return verdicts.read(answer, c.ids, rubrics.points, turns)

    if len(calls) == 1:
        return await ask(calls[0])
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
