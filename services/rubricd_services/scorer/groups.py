"""Group judging on the gathering (runtime.gathering): a sample group's members, read by different scorers, are
judged once.

A member joins its group's hash, its rollouts entry acked in the same script: from then on the hash holds it,
whichever process dies. The group is due at its deadline (`group_deadline_s` after its first member), or at once
when its `group_size` members are in; the scorer that claims it (the one whose member completed it, or any
scorer's sweep) judges its members still without a score, under a lease renewed while it judges, and decides it
(the gathering's one claimant loop, `Claimant`). If that scorer dies, the lease runs out and another claims the
group. A member that arrives once the group was
claimed is judged alone.
The details: docs/researchers/groups.md, "Group judging"; docs/operators/recover.md, "Delivery".
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import SCORERS, Keys
from rubricd.messages import Rollout, instance_key
from rubricd_services.runtime.gathering import Claim, Claimant, Gathering, Joined, Retries
from rubricd_services.runtime.outage import Outages

log = logging.getLogger("rubricd.scorer")
DUE_GROUPS = 16  # groups one sweep claims at most


@dataclass(frozen=True)
class Claimed:
    """A group claimed for judging: its key, its members, and whether it is given up on (the gathering's policy:
    `max_failures` failed judgings, or `max_redeliveries` scorers that died judging it)."""

    key: str
    members: list[Rollout]
    given_up: bool


Judge = Callable[[list[Rollout], Claimed], Awaitable[None]]  # judges members that share a prompt, commits scores


class Groups:
    """The scorer's sample groups: gathered in Redis, each judged once by `judge` (the gathering's claimant)."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        consumer: str,
        judge: Judge,
        retries: Retries,
        outages: Outages,
        *,
        deadline_s: float,
        lease_s: float,
        ttl_s: int,
    ) -> None:
        self.redis, self.keys, self.judge = redis, keys, judge
        self.gathering = Gathering(
            redis,
            keys.groups_due,
            consumer,
            deadline_s=deadline_s,
            lease_s=lease_s,
            ttl_s=ttl_s,
            stream=keys.rollouts,
            consumer_group=SCORERS,
        )
        self.claimant = Claimant(self.gathering, self.decide, retries, outages, describe="judging group {}".format)

    def key(self, rollout: Rollout) -> str:
        assert rollout.group is not None
        return self.keys.group(rollout.run_id, rollout.step, rollout.group)

    async def gather(self, rollout: Rollout, entry_id: bytes) -> bool:
        """A member joins its group (its entry acked), and the group is judged, in this handler, if it completes
        it; False if the member is to be judged alone (scored before: its first score again; or its group was
        claimed: late)."""
        if await self.redis.get(self.keys.score(rollout.run_id, rollout.rollout_id)) is not None:
            return False
        key = self.key(rollout)
        joined = await self.gathering.join(
            key, rollout.rollout_id, wire.encode(rollout), size=rollout.group_size, entry_id=entry_id
        )
        if joined is Joined.LATE:
            log.info("rollout %s/%s came after its group was judged; judged alone", rollout.run_id, rollout.rollout_id)
            return False
        if joined is Joined.COMPLETE:
            await self.claimant.attempt(key)
        return True

    async def sweep(self) -> None:
        """Judge the groups due (at their deadline, or whose claim ran out or failed), in this process, before the
        next sweep: at most DUE_GROUPS at a time."""
        due = await self.gathering.due(DUE_GROUPS)
        await asyncio.gather(*(self.claimant.attempt(key) for key in due))

    async def decide(self, claim: Claim, give_up: bool) -> None:
        """Judge the claimed group's members still without a score, and decide it."""
        members = sorted((wire.decode(body, Rollout) for body in claim.members.values()), key=lambda r: r.rollout_id)
        claimed = Claimed(claim.name, members, give_up)
        keys = [self.keys.score(m.run_id, m.rollout_id) for m in members]
        scored = await self.redis.mget(keys) if keys else []
        todo = [m for m, first in zip(members, scored, strict=True) if first is None]
        for part in _parts(todo):
            await self.judge(part, claimed)
        await self.gathering.decide(claim.name)


def _parts(members: list[Rollout]) -> list[list[Rollout]]:
    """The members split by what they are judged against: their prompt (instance), text or trajectory."""
    parts: dict[tuple[str, bool], list[Rollout]] = {}
    for member in members:
        parts.setdefault((instance_key(member), bool(member.trajectory)), []).append(member)
    return list(parts.values())
