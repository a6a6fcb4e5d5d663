"""The demo's training loop, in synchronous mode, and what it records of each step.

Each step: sample a batch from the policy, score it, close the step, wait for
the rubric update that follows it (so the next step is scored with the rubrics
made from this one), read what the updater decided and why, and let the
policy learn from the rewards it got per behaviour. A run whose task has its
own seed rubrics (the agent's) installs them as version 1 before its first
step; a run with promotion gated also gets its judge canaries (the labelled
judge set's arithmetic items, as `rubricd judge canaries` sets them), which
the gate holds each candidate's interference against. Each step keeps its first rollout of each behaviour with its Score, for
the report to show one turn by turn.

The loop reads only what any trainer can read: its scores, the rubric store,
the announcement streams (step summaries, rubric updates, the updater's
events) and, under the alternating reward, the run's schedule (what `rubricd
schedule RUN` shows: each step's active meta-class and why).
"""

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import cast

import msgspec
from redis.asyncio import Redis
from redis.typing import KeyT, StreamIdT

from rubricd import RubricdClient, wire
from rubricd.keys import Keys
from rubricd.messages import (
    UPDATE_OUTCOMES,
    AnalysisSample,
    Event,
    EventKind,
    JudgeMode,
    JudgeStatus,
    Promotion,
    PromotionPlan,
    Rollout,
    RubricModification,
    RubricSet,
    RubricsUpdated,
    Score,
    StepSummary,
)
from rubricd_services.state import promotion, usage
from rubricd_services.state.rubric_sets import RubricStore
from rubricd_services.state.schedule import explain, read_history

from .agent import AGENT
from .policy import ARITHMETIC, START, Policy, Task

TASKS = {"amaris": ARITHMETIC, "agent": AGENT}  # --method -> what its policy does
CANARY_ITEMS = "add-"  # the judge set's arithmetic items: a gated run's canaries


def canary_set() -> bytes:
    """The labelled judge set's arithmetic items, as a run's canary set holds them (JSONL)."""
    data = resources.files("rubricd_services.judges.evaluation").joinpath("data/judge-set.jsonl").read_text()
    lines = [line for line in data.splitlines() if line.strip()]
    return "\n".join(line for line in lines if msgspec.json.decode(line)["id"].startswith(CANARY_ITEMS)).encode()


# Stream entries as redis-py answers them to this client: ids (and XREAD's stream names) bytes, or str for a
# client made with decode_responses=True; the fields as wire.payload reads them. redis-py's own types allow
# None and str anywhere, for any client and protocol: the reads below cast to these.
_Entry = tuple[bytes | str, dict[bytes, bytes]]
_Read = list[tuple[bytes | str, list[_Entry]]]  # XREAD: (stream, its new entries) per stream

# The updater's event for each summary it handled (one per step).


@dataclass
class Update:
    """What the updater did after one step, and why."""

    outcome: str  # one of UPDATE_OUTCOMES (an EventKind), or "unknown" when its event did not show up
    version: int  # the rubric version in force afterwards
    previous_version: int
    strategy: str = ""
    rationale: str = ""
    modifications: list[RubricModification] = field(default_factory=list)
    summary: str = ""  # the step summary's executive summary
    uninformative: list[str] = field(default_factory=list)  # the rubrics its health found uninformative
    fields: dict[str, object] = field(default_factory=dict)  # its event's (promotion gated: the gate's figures)


@dataclass
class Example:
    """A rollout of the step and its Score."""

    behaviour: str
    rollout: Rollout
    score: Score


@dataclass
class StepRecord:
    step: int
    rubric_versions: list[int]  # the versions its scores name (one in synchronous mode)
    shares: dict[str, float]  # the policy's mix when it sampled the batch
    counts: dict[str, int]  # rollouts per behaviour
    mean_reward: dict[str, float]  # per behaviour, over the scores that have a reward
    mean: float | None  # over the whole batch
    judge_failures: int = 0
    discovered: str | None = None  # the hack the policy found at this step
    update: Update | None = None
    class_means: dict[str, float] = field(default_factory=dict)  # per meta-class, over the scores where defined
    active_meta_class: str | None = None  # alternating: the class the step's Scores name (None: weighted total)
    schedule: str = (
        ""  # alternating: the schedule's decision for the step, and why (rubricd_services.state.schedule.explain)
    )
    turn_rubrics: list[str] = field(default_factory=list)  # the ids of the turn rubrics that scored the step
    examples: list[Example] = field(default_factory=list)  # the first rollout of each behaviour, scored
    # The run's LLM use once the step's update is in (its analyses, summary and update done): per agent, calls
    # and tokens so far; the report reads each step's share as the difference with the step before.
    calls: dict[str, int] = field(default_factory=dict)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    completion_tokens: dict[str, int] = field(default_factory=dict)
    # When (time.time()) the batch was published, the step closed (its scores all back) and its rubric update
    # in; each rollout's publish-to-score seconds (its Score's scored_at).
    published_at: float = 0.0
    closed_at: float = 0.0
    updated_at: float = 0.0
    score_latencies: list[float] = field(default_factory=list)
    # Promotion gated: the version of the candidate in shadow its scores name, and per behaviour its mean reward.
    candidate_version: int | None = None
    candidate_reward: dict[str, float] = field(default_factory=dict)


@dataclass
class Run:
    run_id: str
    steps: int
    rollouts: int
    seed: int
    learning_rate: float
    namespace: str
    started_at: float
    reward_policy: str = "weighted_sum"  # set on every rollout of the run
    target: float = 0.9  # the class mean the report counts steps to
    start: dict[str, float] = field(default_factory=lambda: dict(START))  # the policy's mix at step 0
    method: str = "amaris"  # which task the policy does (TASKS)
    judge_mode: JudgeMode = "single"  # set on every rollout of a grouped run
    group_size: int | None = None  # G responses sampled per prompt (None: one per prompt)
    analysis_sample: AnalysisSample | None = None  # set on every rollout of a grouped run (None: the analyzers')
    promotion: Promotion | None = None  # the run's own (rubricd_services.state.promotion), None: the updater's settings
    shadow_steps: int = 1
    finished_at: float | None = None
    records: list[StepRecord] = field(default_factory=list)
    history: list[RubricSet] = field(default_factory=list)  # every rubric version, oldest first
    error: str | None = None  # why the run stopped early
    compared_with: "Run | None" = None  # the same seed and start under another reward policy
    judged_alone: "Run | None" = None  # a group-judged run's twin: the same seed, each rollout judged alone
    promoted_at_once: "Run | None" = None  # a gated run's twin: the same seed, promotion immediate

    @property
    def task(self) -> Task:
        return TASKS[self.method]

    @property
    def complete(self) -> bool:
        done = self.error is None and len(self.records) == self.steps
        twins = [t for t in (self.compared_with, self.judged_alone, self.promoted_at_once) if t is not None]
        return done and all(t.complete for t in twins)


class Announcements:
    """Reads the streams the memory loop announces on, from a given point, and keeps what concerns one run."""

    def __init__(self, redis: Redis, keys: Keys, run_id: str) -> None:
        self.redis, self.keys, self.run_id = redis, keys, run_id
        self.outcomes: dict[int, Event] = {}  # step -> the updater's event
        self.updates: dict[int, RubricsUpdated] = {}  # version -> announcement
        self.summaries: dict[int, StepSummary] = {}  # step -> global step summary
        self._last: dict[KeyT, StreamIdT] = {}  # stream name -> the last entry id read

    async def start(self) -> None:
        """Read only what is announced from now on."""
        for stream in (self.keys.events, self.keys.rubrics_updated, self.keys.summaries):
            newest = cast(list[_Entry], await self.redis.xrevrange(stream, count=1))
            self._last[stream] = newest[0][0] if newest else "0-0"

    async def poll(self) -> None:
        response = cast(_Read, await self.redis.xread(dict(self._last), count=1000))
        for stream, entries in response or []:
            name = stream.decode() if isinstance(stream, bytes) else stream
            for _, fields in entries:
                self._keep(name, wire.payload(fields))
            self._last[name] = entries[-1][0]

    def _keep(self, stream: str, data: bytes) -> None:
        try:
            if stream == self.keys.events:
                event = wire.decode(data, Event)
                if (
                    event.service == "updater"
                    and event.run_id == self.run_id
                    and event.kind in UPDATE_OUTCOMES
                    and event.step is not None
                ):
                    self.outcomes[event.step] = event
            elif stream == self.keys.rubrics_updated:
                update = wire.decode(data, RubricsUpdated)
                if update.run_id == self.run_id and update.instance_key is None:
                    self.updates[update.version] = update
            else:
                summary = wire.decode(data, StepSummary)
                if summary.run_id == self.run_id and summary.instance_key is None:
                    self.summaries[summary.step] = summary
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass  # not ours to judge: the services dead-letter what they cannot read

    async def update_after(self, step: int, previous: int, current: RubricSet, wait: float = 10.0) -> Update:
        """What the updater did with `step`'s summary (its event and announcement are written just after the step marker)."""
        deadline = time.monotonic() + wait
        while True:
            await self.poll()
            event = self.outcomes.get(step)
            announced = current.version == previous or current.version in self.updates
            if (event is not None and announced) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        announcement = self.updates.get(current.version) if current.version != previous else None
        summary = self.summaries.get(step)
        return Update(
            outcome=event.kind if event else (EventKind.RUBRICS_UPDATED if announcement else "unknown"),
            version=current.version,
            previous_version=previous,
            strategy=str(announcement.strategy)
            if announcement
            else str((event.fields if event else {}).get("strategy") or ""),
            rationale=event.detail if event else "",
            modifications=list(announcement.modifications) if announcement else [],
            summary=summary.executive_summary if summary else "",
            uninformative=[h.rubric_id for h in summary.health if h.uninformative] if summary else [],
            fields=dict(event.fields) if event else {},
        )


async def train(
    client: RubricdClient,
    run: Run,
    *,
    timeout: float = 300.0,
    on_step: Callable[[StepRecord], None] = lambda record: None,
) -> Run:
    """Run `run.steps` synchronous steps; records land in `run` as they finish (also when a step fails)."""
    policy = Policy(run.steps, seed=run.seed, learning_rate=run.learning_rate, start=dict(run.start), task=run.task)
    announcements = Announcements(client.redis, client.keys, run.run_id)
    await announcements.start()
    if run.task.seeds:
        await RubricStore(client.redis, client.keys).seed(
            RubricSet(run_id=run.run_id, version=1, rubrics=run.task.seeds)
        )
    if run.promotion is not None:
        plan = PromotionPlan(promotion=run.promotion, shadow_steps=run.shadow_steps)
        await promotion.write_plan(client.redis, client.keys, run.run_id, plan)
        if run.promotion == "gated":
            await client.redis.set(client.keys.canary_set(run.run_id), canary_set())
    try:
        for step in range(run.steps):
            record = await one_step(client, announcements, policy, run, step, timeout)
            run.records.append(record)
            on_step(record)
    finally:
        run.history = await client.rubrics.history(run.run_id)
        run.finished_at = time.time()
    return run


async def one_step(
    client: RubricdClient, announcements: Announcements, policy: Policy, run: Run, step: int, timeout: float
) -> StepRecord:
    discovered = policy.explore(step)
    shares = policy.shares()
    mode = run.judge_mode if run.group_size else None
    sample = run.analysis_sample if run.group_size else None
    batch = policy.sample(run.run_id, step, run.rollouts, run.reward_policy, run.group_size, mode, sample)
    published_at = time.time()
    scores = await client.score([r for _, r in batch], timeout=timeout)
    await client.close_step(run.run_id, step, rollouts=len(batch))
    closed_at = time.time()

    behaviours = run.task.behaviours
    rewards: dict[str, list[float]] = {}
    shadowed: dict[str, list[float]] = {}  # under a candidate in shadow
    for (behaviour, _), score in zip(batch, scores):
        if score.status is JudgeStatus.OK and score.reward is not None:
            rewards.setdefault(behaviour, []).append(score.reward)
        if score.candidate is not None and score.candidate.reward is not None:
            shadowed.setdefault(behaviour, []).append(score.candidate.reward)
    candidates = sorted({s.candidate.version for s in scores if s.candidate is not None})
    mean_reward = {b: statistics.fmean(rewards[b]) for b in behaviours if b in rewards}
    everything = [r for rs in rewards.values() for r in rs]
    used = sorted({s.rubric_version for s in scores})
    scored_with = await client.rubrics.version(run.run_id, None, used[-1])
    firsts: dict[str, Example] = {}
    for (behaviour, rollout), score in zip(batch, scores):
        firsts.setdefault(behaviour, Example(behaviour, rollout, score))
    by_class: dict[str, list[float]] = {}
    for score in scores:
        if score.status is JudgeStatus.OK:
            for meta_class, value in score.meta_class_scores.items():
                by_class.setdefault(meta_class, []).append(value)
    active = sorted({s.active_meta_class or "" for s in scores if s.status is JudgeStatus.OK})
    schedule = (await read_history(client.redis, client.keys, run.run_id)).get(step)

    await client.wait_for_rubrics(run.run_id, step, timeout=timeout)
    updated_at = time.time()
    current = await client.rubrics.current(run.run_id)
    assert current is not None, "the scorer seeds a run's rubrics before its first score"
    update = await announcements.update_after(step, previous=used[-1], current=current)
    spent = await usage.read(client.redis, client.keys, run.run_id)
    if everything:
        policy.learn(mean_reward, baseline=statistics.fmean(everything))
    return StepRecord(
        step=step,
        rubric_versions=used,
        shares=shares,
        counts={b: sum(1 for x, _ in batch if x == b) for b in behaviours},
        mean_reward=mean_reward,
        mean=statistics.fmean(everything) if everything else None,
        judge_failures=len(scores) - len(everything),
        discovered=discovered,
        update=update,
        class_means={c: statistics.fmean(v) for c, v in sorted(by_class.items())},
        active_meta_class=",".join(active) or None,  # one class: the schedule is decided once per step
        schedule=explain(schedule) if schedule else "",
        turn_rubrics=[r.id for r in scored_with.rubrics if r.scope == "turn"] if scored_with else [],
        examples=[firsts[b] for b in behaviours if b in firsts],
        calls={u.agent: u.calls for u in spent},
        prompt_tokens={u.agent: u.prompt_tokens for u in spent},
        completion_tokens={u.agent: u.completion_tokens for u in spent},
        candidate_version=candidates[-1] if candidates else None,
        candidate_reward={b: statistics.fmean(shadowed[b]) for b in behaviours if b in shadowed},
        published_at=published_at,
        closed_at=closed_at,
        updated_at=updated_at,
        score_latencies=[s.scored_at - published_at for s in scores if s.scored_at is not None],
    )
