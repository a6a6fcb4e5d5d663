"""Writing an arm reward's effects, and acking its rollout, as one atomic step.

One Lua script stores the reward (only if the rollout has none yet), keeps the rollout with it for `rubricd
export`, logs the event, replies, adds the judge calls' usage and acks: all of it or none, and a rollout
rewarded twice always replies with its first reward.
"""

from collections.abc import Mapping

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import ArmReward, ArmRollout, Event, RewardedArmRollout
from rubricd_services.common.commit import Script
from rubricd_services.common.keeping import Keeping

# An optional key is '': `kept` (kept_maxlen 0), `reply` (no reply_to).
_COMMIT = Script(
    keys="reward kept events arm reply usage",
    args="reward rewarded event answer_ttl group entry_id maxlen reply_ttl kept_maxlen kept_ttl",
    maps="usage",
    reply="reply",
    body="""
local stored = redis.call('GET', k_reward)
local reward = stored or a_reward
if not stored then
  redis.call('SET', k_reward, reward, 'EX', a_answer_ttl)
  if k_kept ~= '' then
    append(k_kept, a_kept_maxlen, a_rewarded)
    redis.call('EXPIRE', k_kept, a_kept_ttl)
  end
  append(k_events, a_maxlen, a_event)
end
reply(k_reply, a_maxlen, reward, a_reply_ttl)
hincrby(k_usage, m_usage)
ack(k_arm, a_group, a_entry_id)
return stored
""",
)


class Effects:
    def __init__(self, redis: Redis, keys: Keys, group: str, keeping: Keeping) -> None:
        self.keys, self.group, self.keeping = keys, group, keeping
        self._commit = _COMMIT.register(redis)

    async def commit(
        self, entry_id: bytes, rollout: ArmRollout, reward: ArmReward, event: Event, usage: Mapping[str, int]
    ) -> bool:
        """Write the effects of rewarding `rollout`; False if it already had a reward (its first is replied).

        `usage` (common.usage.increments) is added to the run's usage either way: the judge calls were made.
        Raises Rejected, having written nothing, if its reply_to names a key that is not a stream.
        """
        stored = await self._commit(
            keys={
                "reward": self.keys.arm_reward(rollout.run_id, rollout.rollout_id),
                "kept": self.keeping.kept(self.keys.kept_arm_rollouts(rollout.run_id)),
                "events": self.keys.events,
                "arm": self.keys.arm,
                "reply": rollout.reply_to or "",
                "usage": self.keys.usage(rollout.run_id),
            },
            args={
                "reward": wire.encode(reward),
                "rewarded": wire.encode(RewardedArmRollout(rollout=rollout, reward=reward)),
                "event": wire.encode(event),
                "group": self.group,
                "entry_id": entry_id,
                **self.keeping.args,
            },
            maps={"usage": usage},
        )
        return stored is None
