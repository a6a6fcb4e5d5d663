"""Writing a score's effects, and acking its rollout, as one atomic step.

One Lua script stores the score (only if the rollout has none yet), replies, hands the rollout to the
analyzers, keeps it with its score for `rubricd rescore`, logs the event, adds the step's class statistics and rubric
health (with the first score only) and the run's usage, and acks: all of it or none, and a rollout scored twice always replies with
its first score. What is written: docs/operators/recover.md, "Delivery".
"""

from collections.abc import Mapping

from redis.asyncio import Redis

from rubricd import health, wire
from rubricd.keys import Keys
from rubricd.messages import Event, Rollout, Score, ScoredRollout
from rubricd_services.common.commit import Script
from rubricd_services.common.keeping import Keeping

from .schedule import stats_increments

# An optional key is '': `scored` (not analysed), `reply` (no reply_to), `kept` (not kept: kept_maxlen 0), `verdict`
# (no new verdict to keep for the judge cache).
_COMMIT = Script(
    keys="score scored events rollouts reply usage stats health kept verdict",
    args="score scored event answer_ttl group entry_id maxlen reply_ttl stats_ttl kept_maxlen kept_ttl "
    "verdict verdict_ttl",
    maps="stats health usage",
    reply="reply",
    body="""
local stored = redis.call('GET', k_score)
local score = stored or a_score
if not stored then
  redis.call('SET', k_score, score, 'EX', a_answer_ttl)
  if k_scored ~= '' then append(k_scored, a_maxlen, a_scored) end
  if k_kept ~= '' then
    append(k_kept, a_kept_maxlen, a_scored)
    redis.call('EXPIRE', k_kept, a_kept_ttl)
  end
  append(k_events, a_maxlen, a_event)
  hincrbyfloat(k_stats, m_stats)
  if #m_stats > 0 then redis.call('EXPIRE', k_stats, a_stats_ttl) end
  hincrby(k_health, m_health)
  if #m_health > 0 then redis.call('EXPIRE', k_health, a_stats_ttl) end
end
reply(k_reply, a_maxlen, score, a_reply_ttl)
hincrby(k_usage, m_usage)
if k_verdict ~= '' then redis.call('SET', k_verdict, a_verdict, 'EX', a_verdict_ttl) end
if a_entry_id ~= '' then ack(k_rollouts, a_group, a_entry_id) end
return stored
""",
)


class Effects:
    def __init__(
        self, redis: Redis, keys: Keys, group: str, keeping: Keeping, *, stats_ttl_s: int, verdict_ttl_s: int = 0
    ) -> None:
        self.keys, self.group, self.keeping = keys, group, keeping
        self.stats_ttl_s, self.verdict_ttl_s = stats_ttl_s, verdict_ttl_s
        self._commit = _COMMIT.register(redis)

    async def commit(
        self,
        entry_id: bytes,
        rollout: Rollout,
        score: Score,
        event: Event,
        usage: Mapping[str, int],
        *,
        analyze: bool = True,
        verdict: tuple[str, bytes] | None = None,
    ) -> bool:
        """Write the effects of scoring `rollout`; False if it already had a score.

        `usage` (common.usage.increments) is added to the run's usage either way: the judge call was made.
        `analyze`: hand the rollout to the analyzers (the memory loop). `verdict`: a new verdict's key and value,
        kept for `verdict_ttl_s` (the judge cache), whether or not the rollout had a score.

        Raises Rejected, having written nothing, if its reply_to names a key that is not a stream.
        """
        stored = await self._commit(
            keys={
                "score": self.keys.score(rollout.run_id, rollout.rollout_id),
                "scored": self.keys.scored if analyze else "",
                "events": self.keys.events,
                "rollouts": self.keys.rollouts,
                "reply": rollout.reply_to or "",
                "usage": self.keys.usage(rollout.run_id),
                "stats": self.keys.class_stats(rollout.run_id, rollout.step),
                "health": self.keys.rubric_health(rollout.run_id, rollout.step, score.instance_key),
                "kept": self.keeping.kept(self.keys.kept_rollouts(rollout.run_id)),
                "verdict": verdict[0] if verdict else "",
            },
            args={
                "score": wire.encode(score),
                "scored": wire.encode(ScoredRollout(rollout=rollout, score=score)),
                "event": wire.encode(event),
                "group": self.group,
                "entry_id": entry_id,
                **self.keeping.args,
                "stats_ttl": self.stats_ttl_s,
                "verdict": verdict[1] if verdict else "",
                "verdict_ttl": self.verdict_ttl_s,
            },
            maps={
                "stats": stats_increments(score),
                "health": health.increments(score, rollout.group),
                "usage": usage,
            },
        )
        return stored is None
