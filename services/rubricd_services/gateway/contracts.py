"""Each framework's remote-reward request and answer, as the framework sends and reads them.

Plain functions: a request body in, the samples to score out; the scores in, the body to answer, for OpenRLHF,
slime and NeMo Gym. A sample without a reward never gets a silent 0: each answer carries the closest form the
framework can act on. The shapes: docs/integrators/openrlhf.md, slime.md and nemo-gym.md.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from rubricd.chat import text
from rubricd.messages import ArmReward, ArmRollout, InstanceKey, JudgeStatus, ModelName, Order, Phase, Score


@dataclass(frozen=True)
class Sample:
    """One response to score, in the framework's words made plain text."""

    prompt: str
    response: str
    reference: str | None


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a framework is told about one sample: its reward, or why there is none."""

    reward: float | None
    judge_ok: bool
    masked: bool = False
    timed_out: bool = False
    rubric_version: int | None = None
    meta_class_scores: dict[str, float] = {}
    error: str | None = None


def outcome(score: Score | None) -> Outcome:
    if score is None:
        return Outcome(reward=None, judge_ok=False, timed_out=True, error="no score by the deadline")
    return Outcome(
        reward=score.reward,
        judge_ok=score.status is JudgeStatus.OK,
        masked=score.masked,
        rubric_version=score.rubric_version,
        meta_class_scores=dict(score.meta_class_scores),
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
    prompt: str | list[dict[str, Any]]
    response: str
    label: Any = None


def slime_sample(request: SlimeRequest) -> Sample:
    return Sample(prompt=text(request.prompt), response=request.response, reference=_label(request.label))


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
    }


# --- NeMo Gym ----------------------------------------------------------------


class NemoGymRequest(msgspec.Struct, frozen=True):
    """The fields read from a verify request; the whole body is echoed in the answer."""

    responses_create_params: dict[str, Any]
    response: dict[str, Any]
    expected_answer: Any = None
    label: Any = None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(c.get("text", "") for c in content if isinstance(c, dict) and isinstance(c.get("text"), str))
    return ""


def nemo_gym_sample(request: NemoGymRequest) -> Sample:
    """The prompt: the instructions and input messages (Responses API); the response: the assistant's output text."""
    params = request.responses_create_params
    given = params.get("input", "")
    messages = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
    if isinstance(params.get("instructions"), str):
        messages.insert(0, {"role": "system", "content": params["instructions"]})
    prompt = text(
        [
            {"role": m.get("role", "user"), "content": _content_text(m.get("content", ""))}
            for m in messages
            if isinstance(m, dict) and m.get("type", "message") == "message"
        ]
    )
    response = "".join(
        _content_text(item.get("content"))
        for item in request.response.get("output", [])
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role", "assistant") == "assistant"
    )
    reference = request.expected_answer if request.expected_answer is not None else request.label
    return Sample(prompt=prompt, response=response, reference=_label(reference))


def nemo_gym_answer(body: dict[str, Any], o: Outcome, failed_reward: float, classes: Sequence[str]) -> dict[str, Any]:
    """The verify response: the request, `reward`, `reward_components` (every declared meta-class: NeMo Gym wants
    the same objectives for every task), and numeric flags that its aggregate metrics average (they read
    top-level numbers only)."""
    return {
        **body,
        "reward": failed_reward if o.reward is None else o.reward,
        "reward_components": class_scores(o, classes, failed_reward),
        "undefined_classes": undefined_classes(o, classes),
        "judge_ok": float(o.judge_ok),
        "masked": float(o.masked),
        "timed_out": float(o.timed_out),
        "no_reward": float(o.reward is None),
        "rubric_version": o.rubric_version,
        "rubricd_error": o.error,
    }


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
