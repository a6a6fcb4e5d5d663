"""Rubric-ARM's reward functions for TRL: a generator's or a judge's completions, rewarded by the arm service.
Details: docs/researchers/rubric-arm.md.
"""

import uuid
from collections.abc import Callable
from typing import Any, cast

from ..chat import text
from ..client import SyncRubricdClient
from ..messages import ArmRollout, JudgeStatus, Order, Phase
from .reward import optional_str
from .trl import trl_step


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
    `first_step` + TRL's global step: a trainer of several turns (rubricd.messages.Plan.turns) starts each at the turn's
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
        step = first_step + trl_step(trainer_state)
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
                generator_model=(optional_str(models[i]) if models is not None else None) or generator_model,
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
    return None if values is None else optional_str(values[i])
