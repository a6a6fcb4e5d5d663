"""Rubric health, per step: how often each rubric is met, and whether its verdicts differ within sample groups.

GRPO and its kin learn from how rewards differ inside a group: a rubric that every response of a group meets,
or none does, teaches that group nothing. The scorer adds each training rollout's first ok score to its step's
health hash (`Keys.rubric_health`, in the commit script, with `increments`); `health` turns the hash into a
`RubricHealth` per rubric, which the summarizer puts in the step summary and `rubricd rubrics health` and the
dashboard show. What it means: docs/researchers/groups.md, "Rubric health".
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import JudgeStatus, RubricHealth, Score
from rubricd_services.state import runs

UNGROUPED = ""  # the group of a step's rollouts that name none


def increments(score: Score, group: str | None) -> dict[str, int]:
    """What one committed score adds to its step's health hash: `n:<group>:<rubric>` for each verdict,
    `m:<group>:<rubric>` for each one met (a group id holds no ':'), and judged by votes `v:<group>:<rubric>`, with
    `s:<group>:<rubric>` where they split. Nothing for a score that is not ok or of an evaluation rollout: neither
    trains."""
    if score.status is not JudgeStatus.OK or score.evaluation:
        return {}
    out: dict[str, int] = {}
    for r in score.results:
        out[f"n:{group or UNGROUPED}:{r.rubric_id}"] = 1
        if r.met:
            out[f"m:{group or UNGROUPED}:{r.rubric_id}"] = 1
        if r.agreement is not None:
            out[f"v:{group or UNGROUPED}:{r.rubric_id}"] = 1
            if r.agreement < 1:
                out[f"s:{group or UNGROUPED}:{r.rubric_id}"] = 1
    return out


@dataclass
class _Counts:
    rollouts: int = 0
    met: int = 0
    groups: int = 0
    spread: int = 0
    voted: int = 0
    split: int = 0


def health(fields: Mapping[str, int]) -> list[RubricHealth]:
    """Each rubric's health from a step's health hash (field -> count), by rubric id."""
    counted: dict[str, dict[tuple[str, str], int]] = {kind: {} for kind in "nmvs"}
    for name, count in fields.items():
        kind, group, rubric_id = name.split(":", 2)
        counted[kind][group, rubric_id] = count
    rubrics: dict[str, _Counts] = {}
    for (group, rubric_id), n in counted["n"].items():
        m = counted["m"].get((group, rubric_id), 0)
        c = rubrics.setdefault(rubric_id, _Counts())
        c.rollouts, c.met, c.groups, c.spread = c.rollouts + n, c.met + m, c.groups + 1, c.spread + (0 < m < n)
        c.voted += counted["v"].get((group, rubric_id), 0)
        c.split += counted["s"].get((group, rubric_id), 0)
    return [
        RubricHealth(
            rubric_id=rubric_id,
            met_rate=c.met / c.rollouts,
            rollouts=c.rollouts,
            groups=c.groups,
            groups_with_spread=c.spread,
            uninformative=c.spread == 0,
            voted=c.voted,
            votes_split=c.split,
        )
        for rubric_id, c in sorted(rubrics.items())
    ]


async def read(redis: Redis, keys: Keys, run_id: str, step: int, instance_key: str | None = None) -> list[RubricHealth]:
    """A step's rubric health (none once its hash has expired, or before its first ok score)."""
    raw = await redis.hgetall(keys.rubric_health(run_id, step, instance_key))
    return health({wire.string(k): int(v) for k, v in raw.items()})


async def steps(redis: Redis, keys: Keys, run_id: str, instance_key: str | None = None) -> list[int]:
    """The steps of a run (and instance) whose health hash is still kept, in order: those of its index
    (`Keys.rubric_health_steps`) whose hash has not expired by Redis's clock."""
    now, _ = await redis.time()
    found = cast(list[bytes], await redis.zrangebyscore(keys.rubric_health_steps(run_id, instance_key), now, "+inf"))
    return sorted(int(step) for step in found)


async def latest_steps(redis: Redis, keys: Keys, run_ids: list[str]) -> dict[str, int]:
    """Each of `run_ids`' latest step whose (global) health hash is still kept, as `steps` reads them, in one
    pipeline; runs with none left out."""
    now, _ = await redis.time()
    found = await runs.each(
        redis, run_ids, lambda pipe, run: pipe.zrangebyscore(keys.rubric_health_steps(run), now, "+inf")
    )
    return {run: max(int(step) for step in steps) for run, (steps,) in zip(run_ids, found, strict=True) if steps}
