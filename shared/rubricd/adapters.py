"""Reward functions for trainers, backed by rubricd: TRL's `reward_funcs` (rubric rewards, and Rubric-ARM's two
models' with `trl_arm_reward`) and verl's `compute_score`.

    client = SyncRubricdClient("redis://rubricd-redis:6399/0")
    reward = trl_reward(client, run_id="grpo-1", reference_column="answer")
    GRPOTrainer(..., reward_funcs=[reward]).train()
    reward.finish()  # close the last step

A batch is published in one round trip; per-sample calls wait concurrently on the client's one reply reader.
Rollout ids are fresh per call; the first rollout of a later step closes the earlier ones (`finish()` the
last), each rank closing its own part (`RANK`, `WORLD_SIZE`, or `rank=`, `world_size=`); evaluation calls are
published as evaluation rollouts. Details: docs/integrators/trl.md and docs/integrators/verl.md.
"""

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from .client import RubricdClient, SyncRubricdClient
from .messages import ArmRollout, JudgeStatus, Order, Phase, Rollout, Score, TrainingContext

Sample = tuple[str, str, str | None, str | None, dict[str, str]]  # prompt, response, reference, instance key, metadata
_F = TypeVar("_F", bound=Callable[..., Any])


class Steps:
    """The trainer's open steps and the rollout ids published for each; closed when a later step begins."""

    def __init__(
        self,
        client: RubricdClient,
        run_id: str,
        *,
        wait_for_rubrics: bool,
        timeout: float | None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        """`rank` of `world_size`: this process's part of every step (each process closes its own part)."""
        self.client, self.run_id = client, run_id
        self.wait_for_rubrics, self.timeout = wait_for_rubrics, timeout
        self.part = {"part": rank, "parts": world_size} if world_size > 1 else {}
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
        await self.client.close_step(self.run_id, step, rollouts=len(ids), rollout_ids=ids, **self.part)
        self.closed_through = max(self.closed_through, step)


class Reward:
    """What every adapter does: turn samples into rollouts of one run, count them in their step, score them."""

    def __init__(
        self,
        client: SyncRubricdClient,
        run_id: str,
        *,
        context: TrainingContext = TrainingContext(),
        timeout: float | None = None,
        wait_for_rubrics: bool = False,
        reward_policy: str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        evaluation: bool = False,
    ) -> None:
        """`reward_policy`: this run's policy (e.g. "alternating"), set on every rollout; None: the deployment's.
        `evaluation`: every rollout is an evaluation rollout (a reward used only to evaluate).
        `rank`, `world_size`: this process's place in a job of several (default: the RANK and WORLD_SIZE
        environment variables that torchrun and accelerate set; else one process)."""
        self.client, self.run_id, self.context, self.timeout = client, run_id, context, timeout
        self.reward_policy, self.evaluation = reward_policy, evaluation
        rank = int(os.environ.get("RANK", 0)) if rank is None else rank
        world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self.steps = Steps(
            client.aio, run_id, wait_for_rubrics=wait_for_rubrics, timeout=timeout, rank=rank, world_size=world_size
        )

    def score(self, step: int, samples: Sequence[Sample], *, evaluation: bool = False) -> list[Score]:
        """Score `samples` of `step`; `evaluation` (or the reward's own): as evaluation rollouts, not counted."""
        return self.client.submit(self._score(step, samples, evaluation or self.evaluation)).result()

    async def score_async(self, step: int, samples: Sequence[Sample], *, evaluation: bool = False) -> list[Score]:
        return await asyncio.wrap_future(self.client.submit(self._score(step, samples, evaluation or self.evaluation)))

    def finish(self) -> None:
        """Close every open step (call it when training ends)."""
        self.client.submit(self.steps.finish()).result()

    async def _score(self, step: int, samples: Sequence[Sample], evaluation: bool) -> list[Score]:
        nonce = uuid.uuid4().hex[:10]
        rollouts = [
            Rollout(
                run_id=self.run_id,
                rollout_id=f"{step}-{nonce}-{i}",
                step=step,
                prompt=prompt,
                response=response,
                reference=reference,
                instance_key=instance,
                context=self.context,
                metadata=metadata,
                reward_policy=self.reward_policy,
                evaluation=evaluation,
            )
            for i, (prompt, response, reference, instance, metadata) in enumerate(samples)
        ]
        if not evaluation:
            await self.steps.begin(step, [r.rollout_id for r in rollouts])
        return await self.client.aio.score(rollouts, timeout=self.timeout)


# --- TRL ---------------------------------------------------------------------


def trl_reward(
    client: SyncRubricdClient,
    run_id: str,
    *,
    reference_column: str | None = "reference",
    instance_column: str | None = None,
    name: str = "rubricd",
    **options: Any,
) -> Callable[..., list[float | None]]:
    """A TRL `reward_funcs` entry (GRPOTrainer, RLOOTrainer): f(prompts, completions, **columns) -> rewards.

    The reward is None where the judge failed (TRL leaves it out). `reference_column`
    and `instance_column` name dataset columns; the step is `trainer_state.global_step`.
    Rollouts of TRL's evaluation are evaluation rollouts (see the module's docstring).
    `options`: context, timeout, wait_for_rubrics, reward_policy, rank, world_size, evaluation (see `Reward`).
    Call `.finish()` after training.
    """
    reward = Reward(client, run_id, **options)

    def rubricd(
        prompts: list[Any], completions: list[Any], trainer_state: Any = None, **columns: Any
    ) -> list[float | None]:
        samples = _trl_samples(prompts, completions, columns, reference_column, instance_column)
        scores = reward.score(_trl_step(trainer_state), samples, evaluation=_trl_evaluating(columns))
        return [s.reward for s in scores]

    return _named(rubricd, name, reward)


def async_trl_reward(
    client: SyncRubricdClient,
    run_id: str,
    *,
    reference_column: str | None = "reference",
    instance_column: str | None = None,
    name: str = "rubricd",
    **options: Any,
) -> Callable[..., Awaitable[list[float | None]]]:
    """`trl_reward` as a coroutine function: TRL runs async reward functions concurrently on its own loop."""
    reward = Reward(client, run_id, **options)

    async def rubricd(
        prompts: list[Any], completions: list[Any], trainer_state: Any = None, **columns: Any
    ) -> list[float | None]:
        samples = _trl_samples(prompts, completions, columns, reference_column, instance_column)
        scores = await reward.score_async(_trl_step(trainer_state), samples, evaluation=_trl_evaluating(columns))
        return [s.reward for s in scores]

    return _named(rubricd, name, reward)


def _named(fn: _F, name: str, reward: Reward) -> _F:
    fn.__name__ = fn.__qualname__ = name  # TRL logs each reward function under its __name__
    fn.finish = reward.finish  # type: ignore[attr-defined]
    return fn


def _trl_step(trainer_state: Any) -> int:
    return int(getattr(trainer_state, "global_step", 0) or 0)


def _trl_evaluating(columns: dict[str, Any]) -> bool:
    """Whether TRL calls for evaluation: its trainer's model is in eval mode (the trainer is the owner of the
    `log_metric` method TRL passes to reward functions; without it, training is assumed)."""
    model = getattr(getattr(columns.get("log_metric"), "__self__", None), "model", None)
    return model is not None and getattr(model, "training", True) is False


def _trl_samples(
    prompts: list[Any],
    completions: list[Any],
    columns: dict[str, Any],
    reference_column: str | None,
    instance_column: str | None,
) -> list[Sample]:
    references = columns.get(reference_column) if reference_column else None
    instances = columns.get(instance_column) if instance_column else None
    return [
        (
            text(prompt),
            text(completion, roles=False),
            None if references is None else _str(references[i]),
            None if instances is None else _str(instances[i]),
            {},
        )
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
    ]


def text(value: Any, roles: bool = True) -> str:
    """Plain text of a TRL prompt or completion: a string, or conversational messages ({"role", "content"})."""
    if isinstance(value, str):
        return value
    parts = []
    for message in value:
        content = message.get("content", "")
        if not isinstance(content, str):  # multimodal content: keep the text parts
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        parts.append(f"{message.get('role', 'user')}: {content}" if roles else content)
    return "\n\n".join(parts)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


# --- Rubric-ARM (TRL) -----------------------------------------------------------


class ArmRejected(RuntimeError):
    """The arm service rejected rollouts (a phase its step does not train, a prompt or comparison the run never
    imported, a generator whose rubrics were never written): the trainer is misconfigured, so training stops."""


def trl_arm_reward(
    client: SyncRubricdClient,
    run_id: str,
    *,
    phase: Phase,
    first_step: int = 0,
    judge_model: str | None = None,
    generator_model: str | None = None,
    prompt_id_column: str = "prompt_id",
    comparison_id_column: str = "comparison_id",
    order_column: str = "order",
    timeout: float | None = None,
    name: str | None = None,
) -> Callable[..., list[float | None]]:
    """A TRL `reward_funcs` entry training one of Rubric-ARM's models: its completions are rewarded by the arm
    service (a generator's: the frozen judge's accuracy with its rubrics; a judge's: its verdict against the label).

    The dataset is `rubricd arm dataset`'s for the phase: its `prompt_id` column (generator), `comparison_id`,
    `order` and `generator_model` columns (judge; `generator_model=` when the rows have none). The run's step is
    `first_step` + TRL's global step: a trainer of several turns (rubricd.arm.Plan.turns) starts each at the turn's
    first step. The reward is None where the frozen judge failed; a rejected rollout raises ArmRejected.
    """
    if phase not in ("generator", "judge"):
        raise ValueError(
            f"phase {phase!r}: a reward function trains the generator or the judge; with simultaneous updates, give "
            "each model its own, over the same steps"
        )
    kind = "g" if phase == "generator" else "j"

    def rubricd_arm(
        prompts: list[Any], completions: list[Any], trainer_state: Any = None, **columns: Any
    ) -> list[float | None]:
        step = first_step + _trl_step(trainer_state)
        nonce = uuid.uuid4().hex[:10]
        models = columns.get("generator_model")
        rollouts = [
            ArmRollout(
                run_id=run_id,
                rollout_id=f"{kind}{step}-{nonce}-{i}",
                step=step,
                phase=phase,
                completion=text(completion, roles=False),
                prompt_id=_column(columns, prompt_id_column, i) if phase == "generator" else None,
                comparison_id=_column(columns, comparison_id_column, i) if phase == "judge" else None,
                order=cast(Order, _column(columns, order_column, i) or "AB"),
                judge_model=judge_model,
                generator_model=(_str(models[i]) if models is not None else None) or generator_model,
            )
            for i, completion in enumerate(completions)
        ]
        rewards = client.arm_rewards(rollouts, timeout=timeout)
        refused = [f"{r.rollout_id}: {r.error}" for r in rewards if r.status is JudgeStatus.REJECTED]
        if refused:
            raise ArmRejected(f"{len(refused)} of {len(rewards)} rollouts rejected: {'; '.join(refused[:3])}")
        return [r.reward for r in rewards]

    rubricd_arm.__name__ = rubricd_arm.__qualname__ = name or f"rubricd_arm_{phase}"
    return rubricd_arm


def _column(columns: dict[str, Any], name: str, i: int) -> str | None:
    values = columns.get(name)
    return None if values is None else _str(values[i])


# --- verl --------------------------------------------------------------------


class VerlReward:
    """verl's custom reward function, in its three call forms.

    - `compute_score(data_source, solution_str, ground_truth, extra_info)`: one sample
      (thread-safe: many threads may wait at once);
    - `compute_score_async(...)`: the same, awaitable (verl's reward loop awaits coroutine functions);
    - `compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos)`: verl's
      batch reward manager; the whole batch in one round trip.

    Each returns {"score": reward, "judge_ok": 1.0 or 0.0, "masked": 1.0 or 0.0, "rubric_version": v,
    "weighted_total": w}, the same keys for every sample (see `result`); verl logs the extra keys.
    A failed judge scores `failed_score` with judge_ok 0.0 (verl needs a number); so does a sample the
    `alternating` policy masks (its step's meta-class is undefined for it), with masked 1.0: drop it.
    The prompt comes from extra_info[prompt_field]; the step from extra_info[step_field],
    else from `self.step`, which a trainer callback may set.
    The rollout's instance key comes from extra_info[instance_key_field]. (The old
    keyword names prompt_key, step_key and instance_key are still accepted.)

        reward = VerlReward(SyncRubricdClient(url), run_id="ppo-1")
        compute_score = reward.compute_score   # custom_reward_function.name=compute_score
    """

    def __init__(
        self,
        client: SyncRubricdClient,
        run_id: str,
        *,
        prompt_field: str = "question",
        step_field: str = "global_step",
        instance_key_field: str = "instance_key",
        failed_score: float = 0.0,
        **options: Any,
    ) -> None:
        # The names these fields had before (`instance_key` named a field, not a key).
        prompt_field = options.pop("prompt_key", prompt_field)
        step_field = options.pop("step_key", step_field)
        instance_key_field = options.pop("instance_key", instance_key_field)
        self.reward = Reward(client, run_id, **options)
        self.prompt_field, self.step_field, self.instance_key_field = prompt_field, step_field, instance_key_field
        self.failed_score = failed_score
        self.step = 0

    def compute_score(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **_: Any
    ) -> dict[str, float]:
        [score] = self.reward.score(*self._one(data_source, solution_str, ground_truth, extra_info))
        return self.result(score)

    async def compute_score_async(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **_: Any
    ) -> dict[str, float]:
        [score] = await self.reward.score_async(*self._one(data_source, solution_str, ground_truth, extra_info))
        return self.result(score)

    def compute_score_batch(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[dict[str, Any] | None],
        **_: Any,
    ) -> list[dict[str, float]]:
        infos = [info or {} for info in extra_infos]
        by_step: dict[int, list[int]] = {}
        for i, info in enumerate(infos):
            by_step.setdefault(self._step(info), []).append(i)
        results: list[dict[str, float]] = [{} for _ in infos]
        for step, indices in sorted(by_step.items()):
            samples = [self._sample(data_sources[i], solution_strs[i], ground_truths[i], infos[i]) for i in indices]
            for i, score in zip(indices, self.reward.score(step, samples)):
                results[i] = self.result(score)
        return results

    def finish(self) -> None:
        self.reward.finish()

    def result(self, score: Score) -> dict[str, float]:
        """The same keys for every sample of a run, whatever its status or rubric set: verl's reward loop takes a
        batch's keys from its first sample (a later sample without one fails the step), and its validation wants
        every key of every batch for every sample. Per rubric and per meta-class: `rubricd serve dashboard`."""
        return {
            "score": self.failed_score if score.reward is None else score.reward,
            "judge_ok": float(score.status is JudgeStatus.OK),
            "masked": float(score.masked),
            "rubric_version": float(score.rubric_version),
            "weighted_total": self.failed_score if score.weighted_total is None else score.weighted_total,
        }

    def _one(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None
    ) -> tuple[int, list[Sample]]:
        info = extra_info or {}
        return self._step(info), [self._sample(data_source, solution_str, ground_truth, info)]

    def _step(self, info: dict[str, Any]) -> int:
        step = info.get(self.step_field)
        return self.step if step is None else int(step)

    def _sample(self, data_source: str, solution_str: str, ground_truth: Any, info: dict[str, Any]) -> Sample:
        return (
            str(info.get(self.prompt_field, "")),
            solution_str,
            _str(ground_truth),
            _str(info.get(self.instance_key_field)),
            {"data_source": str(data_source)},
        )
