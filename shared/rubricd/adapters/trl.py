"""TRL's `reward_funcs` entries: `trl_reward`, and `async_trl_reward` for its async reward functions.
Details: docs/integrators/trl.md."""

import importlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from ..chat import text
from ..client import RubricdClient, SyncRubricdClient
from ..messages import Score
from .reward import AsyncReward, RewardOptions, Sample, SyncReward, batch_metrics, optional_str

log = logging.getLogger("rubricd.adapters")

_F = TypeVar("_F", bound=Callable[..., Any])


def trl_reward(
    client: SyncRubricdClient,
    run_id: str,
    *,
    reference_column: str | None = "reference",
    instance_column: str | None = None,
    tools: Sequence[Callable[..., Any] | dict[str, Any]] | None = None,
    num_generations: int | None = None,
    name: str = "rubricd",
    **options: Any,
) -> Callable[..., list[float | None]]:
    """A TRL `reward_funcs` entry (GRPOTrainer, RLOOTrainer): f(prompts, completions, **columns) -> rewards.

    The reward is None where the judge failed (TRL leaves it out). `reference_column`
    and `instance_column` name dataset columns; the step is `trainer_state.global_step`.
    Conversational prompts and completions (tool calls and results included) are sent as the rollout's
    trajectory, with the `tools` offered: functions (as GRPOTrainer's `tools=`) or OpenAI function specs;
    default: the trainer's own `tools`.
    Each completion's sample group is its prompt's `num_generations` completions (default: the trainer's
    `num_generations`, `num_generations_eval` in evaluation), placed as TRL places them (see `TrlGroups`).
    Rollouts of TRL's evaluation are evaluation rollouts (see `rubricd.adapters`). Each batch's figures go to
    the trainer's log through the `log_metric` TRL passes (`batch_metrics`: `rubricd/judge_failed`,
    `rubricd/rubric_version`, `rubricd/rubric/<id>`, `rubricd/meta/<class>`).
    `options`: the run's (RewardOptions: context, timeout, wait_for_rubrics, reward_policy, judge_mode, judge_votes,
    analysis_sample, rank, world_size, evaluation).
    Call `.finish()` after training.
    """
    reward = SyncReward(client, run_id, RewardOptions(**options))
    groups = TrlGroups(num_generations, reward.reward.rank)

    def rubricd(
        prompts: list[Any], completions: list[Any], trainer_state: Any = None, **columns: Any
    ) -> list[float | None]:
        step, evaluating = trl_step(trainer_state), _trl_evaluating(columns)
        samples = _trl_samples(prompts, completions, columns, reference_column, instance_column, tools)
        samples = groups.place(samples, step, evaluating, _trainer(columns))
        scores = reward.score(step, samples, evaluation=evaluating)
        _log(columns, scores)
        return [s.reward for s in scores]

    return _named(rubricd, name, reward.finish)


def async_trl_reward(
    client: RubricdClient | SyncRubricdClient,
    run_id: str,
    *,
    reference_column: str | None = "reference",
    instance_column: str | None = None,
    tools: Sequence[Callable[..., Any] | dict[str, Any]] | None = None,
    num_generations: int | None = None,
    name: str = "rubricd",
    **options: Any,
) -> Callable[..., Awaitable[list[float | None]]]:
    """`trl_reward` as a coroutine function, on a RubricdClient: TRL awaits its async reward functions on one
    event loop of its own (`trainer.async_loop`), where the client connects at the first call. `.finish()` is
    then awaited on that loop after training (docs/integrators/trl.md). A SyncRubricdClient, the old form, is
    still taken, with a DeprecationWarning."""
    reward = AsyncReward(client, run_id, RewardOptions(**options), "async_trl_reward")
    groups = TrlGroups(num_generations, reward.reward.rank)

    async def rubricd(
        prompts: list[Any], completions: list[Any], trainer_state: Any = None, **columns: Any
    ) -> list[float | None]:
        step, evaluating = trl_step(trainer_state), _trl_evaluating(columns)
        samples = _trl_samples(prompts, completions, columns, reference_column, instance_column, tools)
        samples = groups.place(samples, step, evaluating, _trainer(columns))
        scores = await reward.score(step, samples, evaluation=evaluating)
        _log(columns, scores)
        return [s.reward for s in scores]

    return _named(rubricd, name, reward.finish)


def _named(fn: _F, name: str, finish: Callable[[], Any]) -> _F:
    fn.__name__ = fn.__qualname__ = name  # TRL logs each reward function under its __name__
    fn.finish = finish  # type: ignore[attr-defined]
    return fn


def trl_step(trainer_state: Any) -> int:
    return int(getattr(trainer_state, "global_step", 0) or 0)


class TrlGroups:
    """Which completions of a reward call were sampled for one prompt, as GRPOTrainer lays them out.

    TRL hands each process's reward functions its share of the generation batch: the batch is every process's
    share in process order, each prompt's `num_generations` completions consecutive (its RepeatSampler), and
    TRL's own advantage takes groups of `num_generations` from that whole batch (`rewards.view(-1, G)`). So the
    i-th completion of process `rank`, of `n` on each, is in group `(rank * n + i) // G`: a group may straddle
    two processes, each publishing its members under the same id. The id also names the call (its kind and
    its count among this step's calls here, which every process makes alike), so it is unique within the step.
    Where a group's members here have different prompts (not TRL's layout), the call is sent without groups,
    with a warning.
    """

    def __init__(self, num_generations: int | None, rank: int) -> None:
        self.num_generations, self.rank = num_generations, rank
        self.calls: dict[tuple[int, bool], int] = {}  # (step, evaluating) -> calls made

    def place(self, samples: list[Sample], step: int, evaluating: bool, trainer: Any) -> list[Sample]:
        """`samples` with their group and its size; unchanged where the group size is not known."""
        size = self.num_generations or _trainer_generations(trainer, evaluating)
        call = self.calls.get((step, evaluating), 0)
        self.calls[(step, evaluating)] = call + 1
        if not size:
            return samples
        rank = getattr(getattr(trainer, "accelerator", None), "process_index", self.rank)
        placed = trl_groups(samples, size, rank, f"{'eval' if evaluating else 'train'}{call}")
        if placed is None:
            log.warning(
                "step %d: completions in one group of %d have different prompts; sent without groups", step, size
            )
            return samples
        return placed


def trl_groups(samples: list[Sample], size: int, rank: int, call: str) -> list[Sample] | None:
    """`samples` (process `rank`'s share of a call) in TRL's groups of `size`, named `<call>.<group>`; None if the
    members of a group here do not share their prompt."""
    placed = [
        s._replace(group=f"{call}.{(rank * len(samples) + i) // size}", group_size=size) for i, s in enumerate(samples)
    ]
    prompts: dict[str | None, str] = {}
    if any(prompts.setdefault(s.group, s.prompt) != s.prompt for s in placed):
        return None
    return placed


def _trainer_generations(trainer: Any, evaluating: bool) -> int | None:
    """The calling trainer's completions per prompt (GRPOTrainer's, RLOOTrainer's): for training or evaluation."""
    size = getattr(trainer, "num_generations_eval", None) if evaluating else None
    size = size or getattr(trainer, "num_generations", None)
    return size if isinstance(size, int) and size >= 1 else None


def _log(columns: dict[str, Any], scores: list[Score]) -> None:
    """The batch's figures (`batch_metrics`: judge failures, rubric version, each rubric's met rate, each
    meta-class's mean) through the `log_metric` TRL passes, which averages them over its processes and logging
    steps beside its own (`kl`, `reward`)."""
    log_metric = columns.get("log_metric")
    if callable(log_metric):
        for name, value in batch_metrics(scores).items():
            log_metric(name, value)


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
