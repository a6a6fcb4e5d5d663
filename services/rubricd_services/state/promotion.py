"""Promotion's state: a run's candidate rubric sets, their shadow scores, and its own promotion plan.

With promotion gated, a proposal is first a candidate in the rubric set's own hash (`candidate`, one at a time,
on the current version, so a scorer reads both at once: RubricStore.in_force), recorded in the set's candidates
hash by the step it was proposed at and, once decided, by the step it was decided at; the decision and its
promoted version are written at once (`Candidates`). While it is in shadow the scorer's commit adds each training
rollout's first ok score to the candidate's hash (`Keys.shadow_scores`, with `record`); the gate reads them all at
once (`read`). A record holds which rubrics were met, not rewards, so the gate can price each modification alone,
or any of them together, under the rollout's policy (rubricd_services.rubrics.policies) without another judge
call. What the gate checks: docs/researchers/promotion.md. A run's own promotion (`read_plan`) overrides the
updater's settings.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Candidate, JudgeStatus, PromotionPlan, RubricSet, Score
from rubricd_services.runtime.commit import Script
from rubricd_services.state.rubric_sets import VERSIONS


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


_PROPOSE = Script(
    keys="rubric_set candidates",
    args="base_version candidate step",
    body=VERSIONS
    + """
if current_version() ~= tonumber(a_base_version) then return 0 end
if redis.call('HEXISTS', k_rubric_set, 'candidate') == 1 then return 0 end
redis.call('HSET', k_rubric_set, 'candidate', a_candidate)
redis.call('HSET', k_candidates, 'p' .. a_step, a_candidate)
return 1
""",
)

# `promoted` is '' (and `version` 0) when the candidate is rejected.
_DECIDE = Script(
    keys="rubric_set runs instances shadow_scores candidates",
    args="step candidate decided_at promoted version run instance",
    body=VERSIONS
    + """
local pending = redis.call('HGET', k_rubric_set, 'candidate')
if not pending or cjson.decode(pending)['step'] ~= tonumber(a_step) then return 0 end
if a_promoted ~= '' then
  if current_version() ~= tonumber(a_version) - 1 then return 0 end
  write_version(a_version, a_promoted, a_step, a_run, a_instance)
end
redis.call('HDEL', k_rubric_set, 'candidate')
redis.call('DEL', k_shadow_scores)
redis.call('HSET', k_candidates, 'p' .. a_step, a_candidate, 'd' .. a_decided_at, a_step)
return 1
""",
)

_candidate = msgspec.json.Decoder(Candidate)


@dataclass(frozen=True)
class Shadowing:
    """Where a run's (or instance's) candidate stands, seen from one step: the one `pending` (in shadow), the one
    `proposed` at the step, the one `decided` at it."""

    pending: Candidate | None
    proposed: Candidate | None
    decided: Candidate | None


class Candidates:
    """A run's candidates (and each instance set's): proposed, in shadow, decided; their decisions promote."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis, self.keys = redis, keys
        self._propose = _PROPOSE.register(redis)
        self._decide = _DECIDE.register(redis)

    async def shadowing(self, run_id: str, instance_key: str | None, step: int) -> Shadowing:
        """The candidate in shadow, and those proposed and decided at `step` (one round trip)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.rubric_set(run_id, instance_key), "candidate")
            pipe.hmget(self.keys.candidates(run_id, instance_key), [f"p{step}", f"d{step}"])
            pending, (proposed, decided_from) = await pipe.execute()
        decided = None
        if decided_from is not None:
            decided = await self.redis.hget(self.keys.candidates(run_id, instance_key), f"p{int(decided_from)}")
        found = [_candidate.decode(raw) if raw else None for raw in (pending, proposed, decided)]
        return Shadowing(*found)

    async def all(self, run_id: str, instance_key: str | None = None) -> list[Candidate]:
        """Every candidate of a rubric set, with its decision once made, by the step it was proposed at."""
        fields = cast(dict[bytes, bytes], await self.redis.hgetall(self.keys.candidates(run_id, instance_key)))
        found = [_candidate.decode(v) for k, v in fields.items() if k.startswith(b"p")]
        return sorted(found, key=lambda c: c.step)

    async def steps(self, run_id: str, instance_key: str | None = None) -> list[int]:
        """The steps a candidate of the set was proposed at, in order (the field names only)."""
        names = await self.redis.hkeys(self.keys.candidates(run_id, instance_key))
        return sorted(int(n[1:]) for n in (wire.string(n) for n in names) if n.startswith("p"))

    async def proposed(self, run_id: str, instance_key: str | None, steps: Iterable[int]) -> list[Candidate]:
        """The candidates proposed at `steps` (those there are), in the order asked (one HMGET)."""
        wanted = [f"p{s}" for s in steps]
        raws = await self.redis.hmget(self.keys.candidates(run_id, instance_key), wanted) if wanted else []
        return [_candidate.decode(raw) for raw in raws if raw is not None]

    async def propose(self, candidate: Candidate) -> bool:
        """Put `candidate` in shadow; False if the current version is no longer its base or another candidate is
        in shadow."""
        run, instance = candidate.run_id, candidate.instance_key
        keys = {"rubric_set": self.keys.rubric_set(run, instance), "candidates": self.keys.candidates(run, instance)}
        args: dict[str, bytes | int] = {
            "base_version": candidate.base_version,
            "candidate": msgspec.json.encode(candidate),
            "step": candidate.step,
        }
        return bool(await self._propose(keys=keys, args=args))

    async def decide(self, candidate: Candidate, promoted: RubricSet | None) -> bool:
        """Record the decision `candidate` carries, and write `promoted` as the new current version if given (it
        must follow the current one); its shadow scores go. False if `candidate` is not the one in shadow, or the
        promoted version does not follow."""
        assert candidate.decision is not None
        run, instance = candidate.run_id, candidate.instance_key
        keys = {
            "rubric_set": self.keys.rubric_set(run, instance),
            "runs": self.keys.runs,
            "instances": self.keys.rubric_instances(run),
            "shadow_scores": self.keys.shadow_scores(run, candidate.step, instance),
            "candidates": self.keys.candidates(run, instance),
        }
        args: dict[str, bytes | int | str] = {
            "step": candidate.step,
            "candidate": msgspec.json.encode(candidate),
            "decided_at": candidate.decision.step,
            "promoted": msgspec.json.encode(promoted) if promoted else "",
            "version": promoted.version if promoted else 0,
            "run": run,
            "instance": instance or "",
        }
        return bool(await self._decide(keys=keys, args=args))


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
