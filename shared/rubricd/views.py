"""What a trainer reads of the services' state: a run's rubric sets and the marker of the steps whose rubrics are in
place (`RubricdClient.wait_for_rubrics`). Read-only: the services write them (rubricd_services.state.rubric_sets,
which says how the hashes are laid out).
"""

from collections.abc import Iterable
from typing import cast

import msgspec
from redis.asyncio import Redis

from .keys import Keys
from .messages import RubricSet

_decoder = msgspec.json.Decoder(RubricSet)


class RubricView:
    """A namespace's rubric sets, versioned per run (and instance), and each run's done steps."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def current(self, run_id: str, instance_key: str | None = None) -> RubricSet | None:
        raw = await self.redis.hget(self.keys.rubric_set(run_id, instance_key), "current")
        return _decoder.decode(raw) if raw else None

    async def version(self, run_id: str, instance_key: str | None, version: int) -> RubricSet | None:
        raw = await self.redis.hget(self.keys.rubric_set(run_id, instance_key), f"v{version}")
        return _decoder.decode(raw) if raw else None

    async def versions(self, run_id: str, instance_key: str | None, versions: Iterable[int]) -> list[RubricSet]:
        """Those of `versions` the set has, in the order asked (one HMGET)."""
        wanted = [f"v{v}" for v in versions]
        raws = await self.redis.hmget(self.keys.rubric_set(run_id, instance_key), wanted) if wanted else []
        return [_decoder.decode(raw) for raw in raws if raw is not None]

    async def history(self, run_id: str, instance_key: str | None = None) -> list[RubricSet]:
        """Every version of a rubric set, oldest first."""
        # redis-py types hash replies as bytes | str (decode_responses); this view reads bytes.
        fields = cast(dict[bytes, bytes], await self.redis.hgetall(self.keys.rubric_set(run_id, instance_key)))
        sets = [_decoder.decode(v) for k, v in fields.items() if k.startswith(b"v")]
        return sorted(sets, key=lambda s: s.version)

    async def undone(self, run_id: str, steps: Iterable[int]) -> list[int]:
        """Those of `steps` whose rubric update is not complete yet, in order."""
        wanted = sorted(set(steps))
        if not wanted:
            return []
        members = [str(step) for step in wanted]
        scores: list[float | None] = await self.redis.zmscore(self.keys.rubric_steps(run_id), members)
        return [step for step, score in zip(wanted, scores) if score is None]

    async def step(self, run_id: str) -> int | None:
        """The last step whose rubrics are in place, or None."""
        raw = await self.redis.get(self.keys.rubric_step(run_id))
        return int(raw) if raw is not None else None
