"""What every adapter shares: the run's options (`RewardOptions`), its open steps (`Steps`), the samples of one call
made rollouts and scored (`Reward`, on the async client; `SyncReward` for trainers that call synchronously,
`AsyncReward` for async frameworks), and the failure of a sample rubricd gave no reward (`NotScored`)."""

import asyncio
import hashlib
import logging
import os
import re
import uuid
import warnings
from collections.abc import Awaitable, Generator, Sequence
from typing import Any, NamedTuple

import msgspec

from ..client import RubricdClient, SyncRubricdClient
from ..messages import AnalysisSample, JudgeMode, JudgeStatus, Rollout, Score, Tool, TrainingContext, Turn
from .conversation import NotTurns, turns

log = logging.getLogger("rubricd.adapters")
_GROUP = re.compile(r"^[A-Za-z0-9_./-]{1,200}$")  # GroupId's alphabet


class NotScored(RuntimeError):
    """Some samples of a call have no reward from rubricd (the judge failed, the rollout was refused, or the
    `alternating` policy masked it): the framework's own failure, never a reward of 0. `scores` holds the call's
    scores, in order."""

    def __init__(self, scores: Sequence[Score]) -> None:
        failed = [f"sample {i}: {s.status} ({s.error or 'masked'})" for i, s in enumerate(scores) if unscored(s)]
        super().__init__(f"{len(failed)} of {len(scores)} samples not scored by rubricd: " + "; ".join(failed))
        self.scores = list(scores)


def unscored(score: Score) -> bool:
    """Whether rubricd gave the rollout no reward (judge failed, refused, masked)."""
    return score.status is not JudgeStatus.OK or score.reward is None


def sample_metrics(score: Score) -> dict[str, float]:
    """A score's figures as a trainer logs them per sample: its rubric version, each rubric's verdict
    (`rubric/<id>`: 1.0 met, 0.0 not) and each meta-class's score where it is defined (`meta/<class>`)."""
    metrics = {"rubric_version": float(score.rubric_version)}
    metrics.update({f"rubric/{r.rubric_id}": 1.0 if r.met else 0.0 for r in score.results})
    metrics.update({f"meta/{name}": value for name, value in score.meta_class_scores.items()})
    return metrics


def batch_metrics(scores: Sequence[Score], prefix: str = "rubricd/") -> dict[str, float]:
    """A batch's figures for a trainer's log (TRL's `log_metric`): the share of its scores whose judge failed,
    the newest rubric version judged with, each rubric's met rate over the samples judged on it and each
    meta-class's mean score over the samples it is defined for (`<prefix>rubric/<id>`, `<prefix>meta/<class>`)."""
    if not scores:
        return {}
    failed = sum(s.status is JudgeStatus.JUDGE_FAILED for s in scores)
    metrics = {f"{prefix}judge_failed": failed / len(scores)}
    judged = [s for s in scores if s.status is JudgeStatus.OK]
    if not judged:
        return metrics
    metrics[f"{prefix}rubric_version"] = float(max(s.rubric_version for s in judged))
    per: dict[str, list[float]] = {}
    for s in judged:
        for name, value in sample_metrics(s).items():
            if name != "rubric_version":
                per.setdefault(name, []).append(value)
    metrics.update({f"{prefix}{name}": sum(v) / len(v) for name, v in sorted(per.items())})
    return metrics


class RewardOptions(msgspec.Struct, frozen=True, kw_only=True):
    """A run's reward options, as every adapter takes them (its keywords), checked once."""

    context: TrainingContext = msgspec.field(default_factory=TrainingContext)  # set on every rollout
    timeout: float | None = None  # how long a call waits for its scores (and the rubrics); None: the client's
    wait_for_rubrics: bool = False  # synchronous mode: a step begins once the earlier step's rubrics are in place
    reward_policy: str | None = None  # this run's policy (e.g. "alternating"); None: the deployment's
    # This run's judging and analysis (docs/researchers/groups.md): "single" or "group", 1-9 votes, "all",
    # "extremes" or k per group; None: the deployment's.
    judge_mode: JudgeMode | None = None
    judge_votes: int | None = None
    analysis_sample: AnalysisSample | None = None
    # This process's place in a job of several; None: the RANK and WORLD_SIZE that torchrun and accelerate set.
    rank: int | None = None
    world_size: int | None = None
    evaluation: bool = False  # every rollout is an evaluation rollout (a reward used only to evaluate)

    def __post_init__(self) -> None:
        rank, world_size = self.place()
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")

    def place(self) -> tuple[int, int]:
        """This process's rank and world size: as given, else from the environment (0 of 1 where unset)."""
        rank = int(os.environ.get("RANK", 0)) if self.rank is None else self.rank
        world_size = int(os.environ.get("WORLD_SIZE", 1)) if self.world_size is None else self.world_size
        return rank, world_size

    def placed(self) -> bool:
        """Whether the process knows its place (given, or WORLD_SIZE set). A process that does not (a framework's
        reward workers that do not know each other: verl's) closes its steps as a closer of its own, and the
        closers' closures add up (StepClosed.closer)."""
        return self.rank is not None or self.world_size is not None or "WORLD_SIZE" in os.environ


class Sample(NamedTuple):
    """One sample of a trainer's call, as its rollout carries it: its text, and, where the trainer gave chat
    messages, the whole conversation (`messages`, prompt first: `prompt_turns` of them) and the `tools` offered
    (OpenAI function specs), which become the rollout's trajectory; its sample `group` (of `group_size`) where
    the trainer says which responses were sampled for one prompt."""

    prompt: str
    response: str
    reference: str | None = None
    instance_key: str | None = None
    metadata: dict[str, str] = {}
    messages: Sequence[Any] = ()
    prompt_turns: int = 0
    tools: Sequence[Any] = ()
    group: str | None = None
    group_size: int | None = None


class Steps:
    """The trainer's open steps and the rollout ids published for each; closed when a later step begins."""

    def __init__(self, client: RubricdClient, run_id: str, options: RewardOptions) -> None:
        """Each process of several closes its own part of every step (its rank of the world size); one that knows
        neither closes as a closer of its own (its closures add up with the other closers')."""
        self.client, self.run_id = client, run_id
        self.wait_for_rubrics, self.timeout = options.wait_for_rubrics, options.timeout
        self.rank, world_size = options.place()
        several = world_size > 1
        self.part: int | None = self.rank if several else None
        self.parts: int | None = world_size if several else None
        self.closer = None if several or options.placed() else uuid.uuid4().hex[:16]
        self.open: dict[int, list[str]] = {}
        self.closed_through = -1  # rollouts of a step already closed are scored, not counted again
        self._lock = asyncio.Lock()

    async def begin(self, step: int, rollout_ids: Sequence[str]) -> None:
        """Count `rollout_ids` in `step`, first closing every earlier open step (synchronous mode: and waiting for its rubrics)."""
        async with self._lock:
            earlier = sorted(s for s in self.open if s < step)
            for s in earlier:
                await self._close(s)
            if earlier and self.wait_for_rubrics:
                await self.client.wait_for_rubrics(self.run_id, earlier[-1], timeout=self.timeout)
            if step > self.closed_through:
                self.open.setdefault(step, []).extend(rollout_ids)

    async def finish(self) -> None:
        async with self._lock:
            for s in sorted(self.open):
                await self._close(s)

    async def _close(self, step: int) -> None:
        ids = self.open.pop(step)
        await self.client.close_step(
            self.run_id, step, rollouts=len(ids), rollout_ids=ids, part=self.part, parts=self.parts, closer=self.closer
        )
        self.closed_through = max(self.closed_through, step)


class Reward:
    """What every adapter does, on the async client: turn samples into rollouts of one run, count them in their
    step, score them. Await it on one event loop, the one its client is used on."""

    def __init__(self, client: RubricdClient, run_id: str, options: RewardOptions) -> None:
        self.client, self.run_id, self.options = client, run_id, options
        self.steps = Steps(client, run_id, options)
        self.rank = self.steps.rank
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it is awaited on, from its first call

    async def score(self, step: int, samples: Sequence[Sample], *, evaluation: bool = False) -> list[Score]:
        """Score `samples` of `step`; `evaluation` (or the options'): as evaluation rollouts, not counted."""
        self._bind()
        evaluation = evaluation or self.options.evaluation
        rollouts = self._rollouts(step, samples, evaluation)
        if not evaluation:
            await self.steps.begin(step, [r.rollout_id for r in rollouts])
        return await self.client.score(rollouts, timeout=self.options.timeout)

    async def finish(self) -> None:
        """Close every open step (when training ends)."""
        self._bind()
        await self.steps.finish()

    def _bind(self) -> None:
        """Keep to one event loop: the client's connections and reply reader live on the first it was awaited on."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise RuntimeError(
                f"the reward of run {self.run_id!r} is awaited on another event loop than its client's; "
                "give each loop its own RubricdClient and reward"
            )

    def _rollouts(self, step: int, samples: Sequence[Sample], evaluation: bool) -> list[Rollout]:
        nonce, o = uuid.uuid4().hex[:10], self.options
        return [
            Rollout(
                run_id=self.run_id,
                rollout_id=f"{step}-{nonce}-{i}",
                step=step,
                prompt=s.prompt,  # as text too, so a prompt's instance key is what it was
                response="" if trajectory else s.response,  # a trajectory's: its turns' text (tool calls shown)
                reference=s.reference,
                instance_key=s.instance_key,
                context=o.context,
                metadata=s.metadata,
                reward_policy=o.reward_policy,
                evaluation=evaluation,
                trajectory=trajectory,
                tools=tools,
                prompt_turns=s.prompt_turns if trajectory else 0,
                group=s.group,
                group_size=s.group_size if s.group is not None else None,
                judge_mode=o.judge_mode,
                judge_votes=o.judge_votes,
                analysis_sample=o.analysis_sample,
            )
            for i, (s, (trajectory, tools)) in enumerate(zip(samples, trajectories(samples)))
        ]


class SyncReward:
    """A Reward for trainers that call synchronously (TRL, verl): run on the SyncRubricdClient's own event loop, so
    it may be called from many threads, and `score_async` awaited from any loop."""

    def __init__(self, client: SyncRubricdClient, run_id: str, options: RewardOptions) -> None:
        self.client = client
        self.reward = Reward(client.aio, run_id, options)

    def score(self, step: int, samples: Sequence[Sample], *, evaluation: bool = False) -> list[Score]:
        """Score `samples` of `step` (Reward.score), waiting here."""
        return self.client.submit(self.reward.score(step, samples, evaluation=evaluation)).result()

    async def score_async(self, step: int, samples: Sequence[Sample], *, evaluation: bool = False) -> list[Score]:
        """Score `samples` of `step` (Reward.score) on the client's loop, awaited from the caller's."""
        return await asyncio.wrap_future(self.client.submit(self.reward.score(step, samples, evaluation=evaluation)))

    def finish(self) -> None:
        """Close every open step (call it when training ends)."""
        self.client.submit(self.reward.finish()).result()


class AsyncReward:
    """An async framework's reward (verifiers', ART's, TRL's async reward functions): a Reward on its RubricdClient, awaited on the framework's
    own event loop, with no second loop or thread. The client connects on first use, in the loop that awaits it.
    A SyncRubricdClient, the old form, is still taken, with a DeprecationWarning: the calls then run on its loop."""

    def __init__(self, client: RubricdClient | SyncRubricdClient, run_id: str, options: RewardOptions, adapter: str):
        self.sync: SyncReward | None = None
        if isinstance(client, SyncRubricdClient):
            warnings.warn(
                f"{adapter} on a SyncRubricdClient runs rubricd's calls on a second event loop; give it a "
                f"RubricdClient and `await reward.finish()` on the loop that scored",
                DeprecationWarning,
                stacklevel=3,
            )
            self.sync = SyncReward(client, run_id, options)
            self.reward = self.sync.reward
        else:
            self.reward = Reward(client, run_id, options)

    async def score(self, step: int, samples: Sequence[Sample], *, evaluation: bool = False) -> list[Score]:
        if self.sync is not None:
            return await self.sync.score_async(step, samples, evaluation=evaluation)
        return await self.reward.score(step, samples, evaluation=evaluation)

    def finish(self) -> Awaitable[None]:
        """Close every open step: `await` it when training ends (on a SyncRubricdClient they are closed on return,
        as before)."""
        if self.sync is None:
            return self.reward.finish()
        self.sync.finish()
        return _Closed()


class _Closed:
    """An awaitable with nothing left to do (what the old form's `finish()` returns)."""

    def __await__(self) -> Generator[None, None, None]:
        return
        yield


def trajectories(samples: Sequence[Sample]) -> list[tuple[list[Turn], list[Tool]]]:
    """Each sample's turns and offered tools; none for a text sample, and none, with one warning for the call, for
    a sample whose messages or tools cannot be a trajectory (it is scored as text, as before trajectories: a
    message rubricd does not know never stops the trainer)."""
    result: list[tuple[list[Turn], list[Tool]]] = []
    refused: list[str] = []
    for i, sample in enumerate(samples):
        if not sample.messages:
            result.append(([], []))
            continue
        try:
            result.append((turns(sample.messages, sample.prompt_turns), _tools(sample.tools)))
        except NotTurns as e:
            refused.append(f"sample {i}: {e}")
            result.append(([], []))
    if refused:
        log.warning(
            "%d of %d samples' messages are not a trajectory; scored as text (%s)",
            len(refused),
            len(samples),
            "; ".join(refused[:3]),
        )
    return result


def _tools(specs: Sequence[Any]) -> list[Tool]:
    try:
        return msgspec.convert(list(specs), list[Tool])
    except msgspec.ValidationError as e:
        raise NotTurns(str(e).replace("`$[", "`tools[")) from None


def optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def group_id(value: Any) -> str | None:
    """A trainer's group identity as a rollout's `group`: as it is where it fits GroupId's alphabet (verl's uuid,
    a number), else a hash of it (the same value, the same group)."""
    if value is None:
        return None
    text = str(value)
    return text if _GROUP.fullmatch(text) else "h-" + hashlib.sha256(text.encode()).hexdigest()[:32]
