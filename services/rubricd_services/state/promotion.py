"""Shadow scores: the verdicts on a candidate rubric set's changed rubrics beside those of the set in force.

With promotion gated, a candidate rubric set is judged in shadow for a few steps before the gate promotes or
rejects it (services' updater.gate). The scorer's commit adds each training rollout's first ok score to the
candidate's hash (`Keys.shadow_scores`, with `record`); the gate reads them all at once (`read`). A record holds
which rubrics were met, not rewards, so the gate can price each modification alone, or any of them together,
under the rollout's policy (rubricd_services.rubrics.policies) without another judge call. What the gate checks:
docs/researchers/promotion.md. A run's own promotion (`read_plan`) overrides the updater's settings.
"""

from typing import cast

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd.messages import JudgeStatus, PromotionPlan, Score


class ShadowScore(msgspec.Struct, frozen=True, kw_only=True):
    """One rollout's verdicts: the ids of the rubrics in force it met (`met`) and of the candidate's changed
    rubrics it met (`changed`, by their ids in the candidate), its group, and what its reward was made by."""

    step: int
    group: str | None = None
    policy: str = "weighted_sum"
    active: str | None = None
    met: list[str] = []
    changed: list[str] = []


_decoder = msgspec.json.Decoder(ShadowScore)


def record(score: Score) -> bytes | None:
    """What `score` adds to its candidate's shadow scores: nothing unless it was judged under one, ok, and trains."""
    if score.candidate is None or score.status is not JudgeStatus.OK or score.evaluation:
        return None
    shadow = ShadowScore(
        step=score.step,
        group=score.group,
        policy=score.policy,
        active=score.active_meta_class,
        met=[r.rubric_id for r in score.results if r.met],
        changed=[r.rubric_id for r in score.candidate.results if r.met],
    )
    return msgspec.json.encode(shadow)


async def read(
    redis: Redis, keys: Keys, run_id: str, step: int, instance_key: str | None = None
) -> dict[str, ShadowScore]:
    """The shadow scores of the candidate proposed at `step`, by rollout id."""
    raw = await redis.hgetall(keys.shadow_scores(run_id, step, instance_key))
    return {(k.decode() if isinstance(k, bytes) else k): _decoder.decode(v) for k, v in raw.items()}


async def read_plan(redis: Redis, keys: Keys, run_id: str) -> PromotionPlan | None:
    """The run's own promotion (`rubricd rubrics promotion`), or None: the updater's settings."""
    raw = cast(bytes | None, await redis.get(keys.promotion(run_id)))
    return None if raw is None else msgspec.json.decode(raw, type=PromotionPlan)


async def plan(redis: Redis, keys: Keys, run_id: str, default: PromotionPlan) -> PromotionPlan:
    """The run's promotion, resolved: its own, else DEFAULT (the updater's settings)."""
    return await read_plan(redis, keys, run_id) or default


async def write_plan(redis: Redis, keys: Keys, run_id: str, plan: PromotionPlan) -> None:
    """Set the run's own promotion; the updater follows it from the run's next step summary."""
    await redis.set(keys.promotion(run_id), msgspec.json.encode(plan))
