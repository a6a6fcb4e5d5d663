"""Each framework's remote-reward request and answer, as the framework sends and reads them.

Plain functions: a request body in, the samples to score out; the scores in, the body to answer, for OpenRLHF,
slime and NeMo Gym. A sample is text, or a trajectory where the framework sends the conversation (NeMo Gym's
Responses-API items, slime's message prompts, or the raw wire's `trajectory`). A request malformed as messages
raises ValueError naming the field. A sample without a reward never gets a silent 0: each answer carries the
closest form the framework can act on. The shapes: docs/integrators/openrlhf.md, slime.md and nemo-gym.md.
"""

import contextlib
import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from rubricd.adapters.reward import group_id
from rubricd.messages import (
    ArmReward,
    ArmRollout,
    InstanceKey,
    JudgeStatus,
    ModelName,
    Order,
    Phase,
    Score,
    TurnResult,
)
from rubricd.messages.trajectories import MAX_TURNS, Tools, Turn, Turns, malformed

from . import responses


@dataclass(frozen=True)
class Sample:
    """One response to score: its text, or its trajectory (the turns, the tools offered, how many turns were the
    prompt), whose text the rollout fills in; its sample `group` (of `group_size`, else the request's) where the
    framework names it, and its `index` there (so identical responses of one group stay apart)."""

    prompt: str
    response: str
    reference: str | None
    trajectory: list[Turn] = field(default_factory=list)
    tools: Tools = field(default_factory=list)
    prompt_turns: int = 0
    group: str | None = None
    group_size: int | None = None
    index: int | None = None


def _checked(sample: Sample) -> Sample:
    """The sample, if its trajectory is a conversation as a message; else ValueError naming the turn and field."""
    if sample.trajectory and (why := malformed(sample.trajectory, sample.prompt_turns)) is not None:
        raise ValueError(why)
    return sample


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a framework is told about one sample: its reward, or why there is none."""

    reward: float | None
    judge_ok: bool
    masked: bool = False
    timed_out: bool = False
    rubric_version: int | None = None
    meta_class_scores: dict[str, float] = {}
    error: str | None = None
    turns: list[TurnResult] = []  # one per policy turn, where the rubric set has turn rubrics


def outcome(score: Score | None) -> Outcome:
    if score is None:
        return Outcome(reward=None, judge_ok=False, timed_out=True, error="no score by the deadline")
    return Outcome(
        reward=score.reward,
        judge_ok=score.status is JudgeStatus.OK,
        masked=score.masked,
        rubric_version=score.rubric_version,
        meta_class_scores=dict(score.meta_class_scores),
        turns=list(score.turns),
        error=score.error if score.status is not JudgeStatus.OK else ("masked" if score.masked else None),
    )


def _label(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else msgspec.json.encode(value).decode()


# --- OpenRLHF ----------------------------------------------------------------


class OpenRLHFRequest(msgspec.Struct, frozen=True):
    query: list[str]
    prompts: list[str] | None = None
    labels: list[Any] | None = None


def openrlhf_samples(request: OpenRLHFRequest) -> list[Sample]:
    """The response is what the query holds after its prompt (the whole query if it does not start with it)."""
    n = len(request.query)
    prompts = request.prompts if request.prompts is not None else [""] * n
    labels = request.labels if request.labels is not None else [None] * n
    if len(prompts) != n or len(labels) != n:
        raise ValueError(f"query, prompts and labels differ in length ({n}, {len(prompts)}, {len(labels)})")
    return [
        Sample(prompt=p, response=q[len(p) :] if p and q.startswith(p) else q, reference=_label(label))
        for q, p, label in zip(request.query, prompts, labels)
    ]


def openrlhf_answer(outcomes: list[Outcome], failed_reward: float) -> dict[str, Any]:
    rewards = [failed_reward if o.reward is None else o.reward for o in outcomes]
    return {
        "rewards": rewards,
        "scores": [min(1.0, max(0.0, r)) for r in rewards],
        "extra_logs": {
            "rubricd/judge_ok": [float(o.judge_ok) for o in outcomes],
            "rubricd/masked": [float(o.masked) for o in outcomes],
            "rubricd/timed_out": [float(o.timed_out) for o in outcomes],
            "rubricd/no_reward": [float(o.reward is None) for o in outcomes],
        },
    }


# --- slime -------------------------------------------------------------------


class SlimeRequest(msgspec.Struct, frozen=True):
    """slime's body (`prompt`: a string, or messages with apply_chat_template off); a custom reward function may
    send the raw wire's `trajectory`, `tools` and `prompt_turns` instead of the prompt's messages, and the
    sample's `group` (slime's `group_index`), `group_size` (`n_samples_per_prompt`) and `index`."""

    prompt: str | Turns = ""
    response: str = ""
    label: Any = None
    trajectory: Turns = []
    tools: Tools = []
    prompt_turns: Annotated[int, msgspec.Meta(ge=0, le=MAX_TURNS)] = 0
    group: str | int | None = None
    group_size: int | None = None
    index: int | None = None


def slime_sample(request: SlimeRequest) -> Sample:
    """A message prompt is the prompt turns, and the response the assistant turn after them."""
    return dataclasses.replace(
        _slime_sample(request), group=group_id(request.group), group_size=request.group_size, index=request.index
    )


def _slime_sample(request: SlimeRequest) -> Sample:
    reference = _label(request.label)
    if request.trajectory:
        if not isinstance(request.prompt, str):
            raise ValueError("prompt: messages or a trajectory, not both")
        trajectory, prompt_turns = request.trajectory, request.prompt_turns
    elif isinstance(request.prompt, list):
        trajectory = [*request.prompt, Turn(role="assistant", content=request.response)]
        prompt_turns = len(request.prompt)
    elif request.tools or request.prompt_turns:
        raise ValueError("tools and prompt_turns go with a trajectory or a message prompt")
    else:
        return Sample(prompt=request.prompt, response=request.response, reference=reference)
    prompt = request.prompt if isinstance(request.prompt, str) else ""
    return _checked(Sample(prompt, request.response, reference, trajectory, request.tools, prompt_turns))


def slime_reward(o: Outcome, failed_reward: float) -> float:
    return failed_reward if o.reward is None else o.reward


def class_scores(o: Outcome, classes: Sequence[str], failed_reward: float) -> dict[str, float]:
    """Every declared meta-class's score, the failure value where the sample has none (no positive-point rubric of
    the class for its prompt, or no score at all): the same keys for every sample, as per-objective consumers
    (NeMo Gym's GDPO, a trainer's per-key logs) need; `undefined_classes` counts the filled ones."""
    return {c: o.meta_class_scores.get(c, failed_reward) for c in classes}


def undefined_classes(o: Outcome, classes: Sequence[str]) -> float:
    return float(sum(c not in o.meta_class_scores for c in classes))


def slime_reward_dict(o: Outcome, failed_reward: float, classes: Sequence[str]) -> dict[str, Any]:
    """For `--reward-key reward`: the reward beside its flags and sub-scores, the same keys for every sample."""
    return {
        "reward": slime_reward(o, failed_reward),
        "judge_ok": float(o.judge_ok),
        "masked": float(o.masked),
        "timed_out": float(o.timed_out),
        "no_reward": float(o.reward is None),
        "rubric_version": float(o.rubric_version or 0),
        **{f"meta/{c}": v for c, v in class_scores(o, classes, failed_reward).items()},
        "undefined_classes": undefined_classes(o, classes),
        "error": o.error,
        "turns": msgspec.to_builtins(o.turns),
    }


# --- NeMo Gym ----------------------------------------------------------------


TASK_INDEX, ROLLOUT_INDEX = "_ng_task_index", "_ng_rollout_index"  # NeMo Gym's names of a rollout's task and repeat


class NemoGymRequest(msgspec.Struct, frozen=True):
    """The fields read from a verify request; the whole body is echoed in the answer. NeMo Gym names a prompt's
    cohort by its `_ng_task_index` (0.4.0's rollout collection: a dataset row, repeated), or as its genrm_compare
    reads it: `_ng_group_id`, its `_ng_group_attempt` (a replacement group); each member by `_ng_rollout_index`."""

    responses_create_params: dict[str, Any]
    response: dict[str, Any]
    expected_answer: Any = None
    label: Any = None
    group_id: str | None = msgspec.field(default=None, name="_ng_group_id")
    group_attempt: int = msgspec.field(default=0, name="_ng_group_attempt")
    rollout_index: int | None = msgspec.field(default=None, name=ROLLOUT_INDEX)
    task_index: int | str | None = msgspec.field(default=None, name=TASK_INDEX)


def nemo_gym_sample(request: NemoGymRequest) -> Sample:
    """The whole exchange as a trajectory (gateway.responses): the instructions and input are the prompt turns,
    every output item (reasoning, tool calls and their outputs, messages) a turn or part of one. Its group is the
    cohort's id (an attempt after the first a group of its own), else its task's: `task-<_ng_task_index>`."""
    found = responses.trajectory(request.responses_create_params, request.response)
    reference = _label(request.expected_answer if request.expected_answer is not None else request.label)
    cohort = request.group_id
    if cohort is None and request.task_index is not None:
        cohort = f"task-{request.task_index}"
    if cohort is not None and request.group_attempt:
        cohort = f"{cohort}/attempt-{request.group_attempt}"
    sample = Sample("", "", reference, found.turns, found.tools, found.prompt_turns)
    return _checked(dataclasses.replace(sample, group=group_id(cohort), index=request.rollout_index))


def nemo_gym_answer(body: dict[str, Any], o: Outcome, failed_reward: float, classes: Sequence[str]) -> dict[str, Any]:
    """The verify response: the request, `reward`, `reward_components` (every declared meta-class: NeMo Gym wants
    the same objectives for every task), numeric flags that its aggregate metrics average, and NeMo Gym's own
    failure keys (`nemo_gym_failure`), in place of any the request carried (a
    rollout verified again)."""
    return {
        **{k: v for k, v in body.items() if k not in NEMO_GYM_FAILURE_KEYS},
        **nemo_gym_failure(o),
        "reward": failed_reward if o.reward is None else o.reward,
        "reward_components": class_scores(o, classes, failed_reward),
        "undefined_classes": undefined_classes(o, classes),
        "judge_ok": float(o.judge_ok),
        "masked": float(o.masked),
        "timed_out": float(o.timed_out),
        "no_reward": float(o.reward is None),
        "rubric_version": o.rubric_version,
        "rubricd_error": o.error,
        "rubricd_turns": msgspec.to_builtins(o.turns),
    }


NEMO_GYM_FAILURE_KEYS = ("mask_sample", "_ng_failure_class", "_ng_failure_judge_error")


def nemo_gym_failure(o: Outcome) -> dict[str, Any]:
    """NeMo Gym's keys of a sample's failure: `mask_sample` (its agents' verify responses; NeMo RL drops a masked
    sample's gradient), and for a sample without a reward its kind, `_ng_failure_class` (which its rollout
    collection files as failed, not trained on), and a failed judge's reason, `_ng_failure_judge_error` (the name
    its judge_failsafe gives it from 0.5 on)."""
    if o.reward is not None:
        return {"mask_sample": False}
    kind = "timed_out" if o.timed_out else "masked" if o.masked else "judge_failed"
    failed: dict[str, Any] = {"mask_sample": True, "_ng_failure_class": kind}
    return failed | ({"_ng_failure_judge_error": o.error or "no reason given"} if kind == "judge_failed" else {})


def _std(vs: list[float]) -> float:
    """The sample standard deviation in floats (statistics.stdev's exact fractions take a second a column of
    100,000)."""
    mean = math.fsum(vs) / len(vs)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in vs) / (len(vs) - 1))


# NeMo Gym's statistics of a column, in its `<stat>/<column>` keys.
NEMO_GYM_STATS: dict[str, Callable[[list[float]], float]] = {
    "mean": lambda vs: math.fsum(vs) / len(vs),
    "max": max,
    "min": min,
    "median": statistics.median,
    "std": _std,
}
NEMO_GYM_KEY_METRICS = ("reward", "judge_ok", "no_reward", "masked", "timed_out", "undefined_classes")


class NemoGymAggregateRequest(msgspec.Struct, frozen=True):
    """NeMo Gym's AggregateMetricsRequest: the verify responses of a collection, without their `response` (but
    its `usage`) and `responses_create_params`."""

    verify_responses: list[dict[str, Any]]


def nemo_gym_aggregate_metrics(request: NemoGymAggregateRequest) -> dict[str, Any]:
    """NeMo Gym's AggregateMetrics, as its default computes them: each numeric top-level field (and
    `response.usage`'s, a boolean as 0 or 1) described by `<stat>/<field>`, over every rollout (`agent_metrics`)
    and per task (`group_level_metrics`, by `_ng_task_index`, with its rollouts counted and listed);
    `key_metrics` rubricd's headline means. A rollout without its task index is in task 0, one without its repeat
    index numbered by its place in its task (NeMo Gym's own refuses both)."""
    tasks: dict[int | str, list[tuple[int | str | None, dict[str, float]]]] = {}
    for raw in request.verify_responses:
        task = _index(raw.get(TASK_INDEX))
        tasks.setdefault(0 if task is None else task, []).append((_index(raw.get(ROLLOUT_INDEX)), _numbers(raw)))
    overall = _described([row for members in tasks.values() for _, row in members])
    return {
        "group_level_metrics": [_task_metrics(task, tasks[task]) for task in sorted(tasks, key=_order)],
        "agent_metrics": overall,
        "key_metrics": {k: overall[k] for k in (f"mean/{m}" for m in NEMO_GYM_KEY_METRICS) if k in overall},
    }


def _task_metrics(task: int | str, members: list[tuple[int | str | None, dict[str, float]]]) -> dict[str, Any]:
    """One task's entry: its statistics, its rollouts counted (every one of them is in the request: none is
    missing) and each listed by NeMo Gym's rollout id `<task>:<repeat>` with its numbers."""
    numbered = [(i if rollout is None else rollout, row) for i, (rollout, row) in enumerate(members)]
    infos = [
        {"rollout_id": f"{task}:{rollout}", TASK_INDEX: task, ROLLOUT_INDEX: rollout, **row}
        for rollout, row in sorted(numbered, key=lambda m: _order(m[0]))
    ]
    n = len(members)
    return {
        TASK_INDEX: task,
        **_described([row for _, row in members]),
        "num_rollouts": n,
        "expected_num_rollouts": n,
        "missing_num_rollouts": 0,
        "reward_profile_completion_pct": 100.0,
        "rollout_infos": infos,
    }


def _index(value: object) -> int | str | None:
    """A task's or a repeat's index as sent: a whole number (from an int, a bool or a whole float, as pandas
    groups them), a string id, None when missing; anything else as its text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return str(value)


def _order(index: int | str) -> tuple[bool, int | str]:
    """Numbers in order, then string ids."""
    return isinstance(index, str), index


def _numbers(response: Mapping[str, Any]) -> dict[str, float]:
    inner = response.get("response")
    usage = inner.get("usage") if isinstance(inner, dict) else None
    numbers = {}
    for k, v in {**response, **(usage if isinstance(usage, dict) else {})}.items():
        if isinstance(v, int | float) and k not in (TASK_INDEX, ROLLOUT_INDEX):
            with contextlib.suppress(OverflowError):  # an integer beyond a float is left out
                if math.isfinite(number := float(v)):
                    numbers[k] = number
    return numbers


def _described(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each column's statistics, as pandas gives them to NeMo Gym: a column's std wants two values, but where no
    column of these rows has two (one rollout), every column they all have gets std 0; a statistic beyond a
    float's range is left out."""
    columns: dict[str, list[float]] = {}
    for row in rows:
        for k, v in row.items():
            columns.setdefault(k, []).append(v)
    spread = any(len(vs) > 1 for vs in columns.values())
    described = {}
    for k, vs in columns.items():
        for stat, f in NEMO_GYM_STATS.items():
            if stat == "std" and len(vs) < 2:
                if not spread and len(vs) == len(rows):
                    described[f"std/{k}"] = 0.0
                continue
            with contextlib.suppress(OverflowError):
                if math.isfinite(value := float(f(vs))):
                    described[f"{stat}/{k}"] = value
    return described


# --- Rubric-ARM ----------------------------------------------------------------


class ArmSample(msgspec.Struct, frozen=True, kw_only=True):
    """One completion of the model a Rubric-ARM phase trains (an ArmRollout without its run, step and reply)."""

    phase: Phase
    completion: str
    prompt_id: InstanceKey | None = None
    comparison_id: str | None = None
    order: Order = "AB"
    judge_model: ModelName | None = None
    generator_model: ModelName | None = None
    rollout_id: str | None = None


class ArmRequest(msgspec.Struct, frozen=True):
    rollouts: list[ArmSample]


def arm_rollouts(request: ArmRequest, run_id: str, step: int, ids: Sequence[str]) -> list[ArmRollout]:
    """The request's rollouts, each with its own id or the derived one (`ids`)."""
    return [
        msgspec.convert(
            {
                **msgspec.structs.asdict(sample),
                "run_id": run_id,
                "step": step,
                "rollout_id": sample.rollout_id or rollout_id,
            },
            ArmRollout,
        )
        for sample, rollout_id in zip(request.rollouts, ids)
    ]


def arm_answer(rewards: Sequence[ArmReward | None], failed_reward: float) -> dict[str, Any]:
    """`rewards`: one number per rollout (`failed_reward` where the frozen judge failed or none came by the
    deadline), and `arm_rewards`: each ArmReward as the arm service answered it (null where none came)."""
    return {
        "rewards": [failed_reward if r is None or r.reward is None else r.reward for r in rewards],
        "arm_rewards": [None if r is None else msgspec.to_builtins(r) for r in rewards],
    }
