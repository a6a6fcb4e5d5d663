"""The routes: decode a framework's request, read where its rollouts go, score, answer in its contract.

Where a request's rollouts go, first found wins:
- run: header `X-Rubricd-Run`, query `?run=`, body field `rubricd_run` (NeMo Gym rows), setting RUBRICD_DEFAULT_RUN_ID;
- step: header `X-Rubricd-Step`, query `?step=`, body field `rubricd_step`; else 0;
- training context: header `X-Rubricd-Context` (JSON: goal, model_size, total_steps), body `rubricd_context`;
- evaluation rollouts: header `X-Rubricd-Evaluation: 1` or `?evaluation=1`;
- the run's choices (Rollout's fields): headers `X-Rubricd-Judge-Mode`, `X-Rubricd-Judge-Votes`,
  `X-Rubricd-Analysis-Sample`, `X-Rubricd-Group-Size`, or `?judge_mode=`, `?judge_votes=`, `?analysis_sample=`,
  `?group_size=`, or body fields `rubricd_judge_mode`, ... (NeMo Gym rows);
- idempotency key: header `Idempotency-Key` or `X-Request-Id`;
- deadline: header `X-Rubricd-Deadline` or `?deadline=` (seconds), up to RUBRICD_MAX_DEADLINE_S.
"""

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rubricd.client import InvalidRollout
from rubricd.messages import JudgeStatus, TrainingContext

from . import contracts
from .contracts import Outcome, Sample
from .gateway import Busy, Call, RewardGateway, rollout_ids

Endpoint = Callable[[Request], Awaitable[Response]]


class BadRequest(ValueError):
    """A request the gateway cannot turn into rollouts: answered 422, naming what is wrong."""


def json_response(body: object, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(msgspec.json.encode(body), status_code=status, headers=headers, media_type="application/json")


def _first(*values: object) -> str | None:
    for value in values:
        if value is not None and value != "":
            return str(value)
    return None


def _deadline(value: str, most: float) -> float:
    seconds = float(value)
    if not 0 < seconds < math.inf:
        raise ValueError(f"deadline {value!r} is not a positive number of seconds")
    return min(seconds, most)


def _choice(request: Request, body: Mapping[str, Any], name: str) -> str | None:
    """A run's choice `name` (judge_mode, ...): its header, its query parameter, its body field, first found."""
    header = "x-rubricd-" + name.replace("_", "-")
    return _first(request.headers.get(header), request.query_params.get(name), body.get(f"rubricd_{name}"))


def _number(value: str | None) -> int | None:
    return None if value is None else int(value)


def read_call(request: Request, body: Mapping[str, Any], gateway: RewardGateway) -> Call:
    h, q, s = request.headers, request.query_params, gateway.settings
    step = _first(h.get("x-rubricd-step"), q.get("step"), body.get("rubricd_step"))
    deadline = _first(h.get("x-rubricd-deadline"), q.get("deadline"))
    raw_context = h.get("x-rubricd-context")
    try:
        context = (
            msgspec.json.decode(raw_context, type=TrainingContext)
            if raw_context
            else msgspec.convert(body.get("rubricd_context") or {}, TrainingContext)
        )
        return Call(
            run_id=_first(h.get("x-rubricd-run"), q.get("run"), body.get("rubricd_run")) or s.default_run_id,
            step=int(step) if step is not None else 0,
            deadline_s=_deadline(deadline, s.max_deadline_s) if deadline is not None else s.deadline_s,
            context=context,
            evaluation=(_first(h.get("x-rubricd-evaluation"), q.get("evaluation")) or "0").lower() in ("1", "true"),
            key=_first(h.get("idempotency-key"), h.get("x-request-id")),
            **_choices(request, body),
        )
    except (ValueError, msgspec.ValidationError) as e:
        raise BadRequest(f"run, step, context, deadline or the run's choices: {e}") from None


def _choices(request: Request, body: Mapping[str, Any]) -> dict[str, Any]:
    """The run's choices the request gives, as Rollout's fields (their bounds are checked with the rollout)."""
    sample = _choice(request, body, "analysis_sample")
    return {
        "group_size": _number(_choice(request, body, "group_size")),
        "judge_mode": _choice(request, body, "judge_mode"),
        "judge_votes": _number(_choice(request, body, "judge_votes")),
        "analysis_sample": int(sample) if sample is not None and sample.isdigit() else sample,
    }


async def _outcomes(gateway: RewardGateway, contract: str, call: Call, samples: list[Sample]) -> list[Outcome]:
    outcomes = [contracts.outcome(score) for score in await gateway.score(call, samples)]
    for o in outcomes:
        if o.reward is None:
            reason = "timed_out" if o.timed_out else "masked" if o.masked else "judge_failed"
            gateway.metrics.no_reward.labels(contract, reason).inc()
    return outcomes


def endpoint(
    contract: str,
    gateway: Callable[[], RewardGateway],
    handle: Callable[[RewardGateway, Request, bytes], Awaitable[object]],
) -> Endpoint:
    """The route's answer to every outcome but its own: 422 for a bad request, 429 when busy."""

    async def serve(request: Request) -> Response:
        g = gateway()
        try:
            body = await handle(g, request, await request.body())
        except Busy as e:
            g.metrics.requests.labels(contract, "busy").inc()
            return json_response({"error": str(e)}, 429, {"Retry-After": str(g.settings.retry_after_s)})
        except (BadRequest, InvalidRollout, msgspec.DecodeError, msgspec.ValidationError) as e:
            g.metrics.requests.labels(contract, "invalid").inc()
            return json_response({"error": str(e)}, 422)
        g.metrics.requests.labels(contract, "ok").inc()
        return json_response(body)

    return serve


async def openrlhf(gateway: RewardGateway, request: Request, raw: bytes) -> object:
    body = msgspec.json.decode(raw, type=contracts.OpenRLHFRequest)
    try:
        samples = contracts.openrlhf_samples(body)
    except ValueError as e:
        raise BadRequest(str(e)) from None
    outcomes = await _outcomes(gateway, "openrlhf", read_call(request, {}, gateway), samples)
    return contracts.openrlhf_answer(outcomes, gateway.settings.failed_reward)


async def _slime(gateway: RewardGateway, request: Request, raw: bytes) -> Outcome:
    body = msgspec.json.decode(raw, type=contracts.SlimeRequest)
    try:
        sample = contracts.slime_sample(body)
    except ValueError as e:  # malformed as messages, named
        raise BadRequest(str(e)) from None
    [outcome] = await _outcomes(gateway, "slime", read_call(request, {}, gateway), [sample])
    return outcome


async def slime(gateway: RewardGateway, request: Request, raw: bytes) -> object:
    return contracts.slime_reward(await _slime(gateway, request, raw), gateway.settings.failed_reward)


async def slime_dict(gateway: RewardGateway, request: Request, raw: bytes) -> object:
    s = gateway.settings
    return contracts.slime_reward_dict(await _slime(gateway, request, raw), s.failed_reward, s.meta_classes)


async def nemo_gym_verify(gateway: RewardGateway, request: Request, raw: bytes) -> object:
    body = msgspec.json.decode(raw)
    if not isinstance(body, dict):
        raise BadRequest("a verify request is a JSON object")
    verified = msgspec.convert(body, contracts.NemoGymRequest)
    try:
        sample = contracts.nemo_gym_sample(verified)
    except ValueError as e:  # an item malformed as a message, named
        raise BadRequest(str(e)) from None
    [outcome] = await _outcomes(gateway, "nemo_gym", read_call(request, body, gateway), [sample])
    return contracts.nemo_gym_answer(body, outcome, gateway.settings.failed_reward, gateway.settings.meta_classes)


async def nemo_gym_aggregate_metrics(gateway: RewardGateway, request: Request, raw: bytes) -> object:
    """NeMo Gym's rollout collection asks for a collection's metrics when it is done (through its agent); a
    thread computes them, so the rollouts in flight are not held up by a large collection."""
    body = msgspec.json.decode(raw, type=contracts.NemoGymAggregateRequest)
    return await asyncio.to_thread(contracts.nemo_gym_aggregate_metrics, body)


async def arm(gateway: RewardGateway, request: Request, raw: bytes) -> object:
    """Rubric-ARM rewards: every rollout of the request rewarded, or 422 naming those rejected (a rollout of the
    phase its step does not train, an unknown prompt or comparison): a misconfigured trainer fails loudly."""
    body = msgspec.json.decode(raw, type=contracts.ArmRequest)
    call = read_call(request, {}, gateway)
    # Ids derived as for samples: from the idempotency key, else from a hash of everything that decides the reward.
    ids = rollout_ids(
        call,
        [
            Sample(
                s.phase,
                s.completion,
                json.dumps([s.prompt_id, s.comparison_id, s.order, s.judge_model, s.generator_model]),
            )
            for s in body.rollouts
        ],
    )
    try:
        rollouts = contracts.arm_rollouts(body, call.run_id, call.step, ids)
    except msgspec.ValidationError as e:
        raise BadRequest(str(e)) from None
    rewards = await gateway.arm_rewards(call, rollouts)
    rejected = [f"{r.rollout_id}: {r.error}" for r in rewards if r is not None and r.status is JudgeStatus.REJECTED]
    if rejected:
        raise BadRequest("rejected: " + "; ".join(rejected))
    return contracts.arm_answer(rewards, gateway.settings.failed_reward)


async def nemo_gym_seed_session(request: Request) -> Response:
    """NeMo Gym's agents seed a session before a rollout; the gateway keeps none."""
    return json_response({})


def routes(gateway: Callable[[], RewardGateway]) -> list[tuple[str, Route]]:
    """(path, ASGI app) pairs for FastStream's ASGI app, beside /health and /metrics."""
    table: list[tuple[str, Endpoint]] = [
        ("/get_reward", endpoint("openrlhf", gateway, openrlhf)),
        ("/slime/reward", endpoint("slime", gateway, slime)),
        ("/slime/reward_dict", endpoint("slime", gateway, slime_dict)),
        ("/verify", endpoint("nemo_gym", gateway, nemo_gym_verify)),
        ("/seed_session", nemo_gym_seed_session),
        ("/aggregate_metrics", endpoint("nemo_gym_metrics", gateway, nemo_gym_aggregate_metrics)),
        ("/arm/reward", endpoint("arm", gateway, arm)),
    ]
    return [(path, Route(path, serve, methods=["POST"])) for path, serve in table]
