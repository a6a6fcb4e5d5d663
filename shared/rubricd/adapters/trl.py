"""TRL's `reward_funcs` entries: `trl_reward`, and `async_trl_reward` for its async reward functions.
Details: docs/integrators/trl.md."""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..chat import text
from ..client import SyncRubricdClient
from .reward import Reward, Sample, optional_str

_F = TypeVar("_F", bound=Callable[..., Any])


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
    Rollouts of TRL's evaluation are evaluation rollouts (see `rubricd.adapters`).
    `options`: context, timeout, wait_for_rubrics, reward_policy, rank, world_size, evaluation (see `Reward`).
    Call `.finish()` after training.
    """
    reward = Reward(client, run_id, **options)

    def rubricd(
        prompts: list[Any], completions: list[Any], trainer_state: Any = None, **columns: Any
    ) -> list[float | None]:
        samples = _trl_samples(prompts, completions, columns, reference_column, instance_column)
        scores = reward.score(trl_step(trainer_state), samples, evaluation=_trl_evaluating(columns))
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
        scores = await reward.score_async(trl_step(trainer_state), samples, evaluation=_trl_evaluating(columns))
        return [s.reward for s in scores]

    return _named(rubricd, name, reward)


def _named(fn: _F, name: str, reward: Reward) -> _F:
    fn.__name__ = fn.__qualname__ = name  # TRL logs each reward function under its __name__
    fn.finish = reward.finish  # type: ignore[attr-defined]
    return fn


def trl_step(trainer_state: Any) -> int:
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
            None if references is None else optional_str(references[i]),
            None if instances is None else optional_str(instances[i]),
            {},
        )
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
    ]
