"""TRL's `reward_funcs` entries: `trl_reward`, and `async_trl_reward` for its async reward functions.
Details: docs/integrators/trl.md."""

import importlib
from collections.abc import Awaitable, Callable, Sequence
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
    tools: Sequence[Callable[..., Any] | dict[str, Any]] | None = None,
    name: str = "rubricd",
    **options: Any,
) -> Callable[..., list[float | None]]:
    """A TRL `reward_funcs` entry (GRPOTrainer, RLOOTrainer): f(prompts, completions, **columns) -> rewards.

    The reward is None where the judge failed (TRL leaves it out). `reference_column`
    and `instance_column` name dataset columns; the step is `trainer_state.global_step`.
    Conversational prompts and completions (tool calls and results included) are sent as the rollout's
    trajectory, with the `tools` offered: functions (as GRPOTrainer's `tools=`) or OpenAI function specs;
    default: the trainer's own `tools`.
    Rollouts of TRL's evaluation are evaluation rollouts (see `rubricd.adapters`).
    `options`: context, timeout, wait_for_rubrics, reward_policy, rank, world_size, evaluation (see `Reward`).
    Call `.finish()` after training.
    """
    reward = Reward(client, run_id, **options)

    def rubricd(
        prompts: list[Any], completions: list[Any], trainer_state: Any = None, **columns: Any
    ) -> list[float | None]:
        samples = _trl_samples(prompts, completions, columns, reference_column, instance_column, tools)
        scores = reward.score(trl_step(trainer_state), samples, evaluation=_trl_evaluating(columns))
        return [s.reward for s in scores]

    return _named(rubricd, name, reward)


def async_trl_reward(
    client: SyncRubricdClient,
    run_id: str,
    *,
    reference_column: str | None = "reference",
    instance_column: str | None = None,
    tools: Sequence[Callable[..., Any] | dict[str, Any]] | None = None,
    name: str = "rubricd",
    **options: Any,
) -> Callable[..., Awaitable[list[float | None]]]:
    """`trl_reward` as a coroutine function: TRL runs async reward functions concurrently on its own loop."""
    reward = Reward(client, run_id, **options)

    async def rubricd(
        prompts: list[Any], completions: list[Any], trainer_state: Any = None, **columns: Any
    ) -> list[float | None]:
        samples = _trl_samples(prompts, completions, columns, reference_column, instance_column, tools)
        scores = await reward.score_async(trl_step(trainer_state), samples, evaluation=_trl_evaluating(columns))
        return [s.reward for s in scores]

    return _named(rubricd, name, reward)


def _named(fn: _F, name: str, reward: Reward) -> _F:
    fn.__name__ = fn.__qualname__ = name  # TRL logs each reward function under its __name__
    fn.finish = reward.finish  # type: ignore[attr-defined]
    return fn


def trl_step(trainer_state: Any) -> int:
    return int(getattr(trainer_state, "global_step", 0) or 0)


def _trainer(columns: dict[str, Any]) -> Any:
    """The calling trainer: the owner of the `log_metric` method TRL passes to reward functions (None without)."""
    return getattr(columns.get("log_metric"), "__self__", None)


def _trl_evaluating(columns: dict[str, Any]) -> bool:
    """Whether TRL calls for evaluation: its trainer's model is in eval mode (without a trainer, training is
    assumed)."""
    model = getattr(_trainer(columns), "model", None)
    return model is not None and getattr(model, "training", True) is False


def _tool_specs(tools: Sequence[Callable[..., Any] | dict[str, Any]]) -> list[dict[str, Any]]:
    """The offered tools as OpenAI function specs: a function's is the one TRL's chat template renders from its
    signature and docstring (transformers' `get_json_schema`); a spec is kept as given."""
    return [t if isinstance(t, dict) else _json_schema(t) for t in tools]


def _json_schema(function: Callable[..., Any]) -> dict[str, Any]:
    # transformers is TRL's own dependency; the light client does not need it.
    schema: dict[str, Any] = importlib.import_module("transformers.utils").get_json_schema(function)
    return schema


def _trl_samples(
    prompts: list[Any],
    completions: list[Any],
    columns: dict[str, Any],
    reference_column: str | None,
    instance_column: str | None,
    tools: Sequence[Callable[..., Any] | dict[str, Any]] | None,
) -> list[Sample]:
    references = columns.get(reference_column) if reference_column else None
    instances = columns.get(instance_column) if instance_column else None
    if tools is None:
        tools = getattr(_trainer(columns), "tools", None) or []
    offered = _tool_specs(tools) if prompts and not isinstance(prompts[0], str) else []
    return [
        _trl_sample(
            prompt,
            completion,
            None if references is None else optional_str(references[i]),
            None if instances is None else optional_str(instances[i]),
            offered,
        )
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
    ]


def _trl_sample(
    prompt: Any, completion: Any, reference: str | None, instance: str | None, tools: list[dict[str, Any]]
) -> Sample:
    """A text sample; a conversational one (TRL's messages, its tool loop's included) carries its messages too."""
    sample = Sample(text(prompt), text(completion, roles=False), reference, instance)
    if isinstance(prompt, str) or isinstance(completion, str):
        return sample
    return sample._replace(messages=[*prompt, *completion], prompt_turns=len(prompt), tools=tools)
