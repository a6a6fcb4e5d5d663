"""Writing a score's effects, and acking its rollout, as one atomic step.

One Lua script stores the score (only if the rollout has none yet), replies to
the trainer, hands the rollout to the analyzers (an evaluation rollout only if
asked: `analyze`), records it with its score in the run's recorded stream (for
`rubricd replay`: capped at `record_maxlen` a run, expiring `record_ttl_s` after
the run's last score; 0 records nothing), logs the event, adds the
score's meta-class scores to its step's statistics (scorer.schedule; only with
the first score, so they are exactly what the committed scores imply; they expire
`stats_ttl_s` after the step's last score), adds the
judge call to the run's usage (common.usage) and acks the entry. Either all of that
happens or none of it (Redis does not roll a script back, so what could fail
midway, a reply key that is not a stream, is checked before the first write),
and a rollout scored twice (redelivered, or published again) always replies
with its first score.
"""

from collections.abc import Mapping

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event, Rollout, Score, ScoredRollout
from rubricd_services.common.streams import Rejected

from .schedule import stats_increments

# KEYS: score, scored stream ('' = not analysed), events stream, rollouts stream, reply stream ('' = none), the run's
# usage, the step's class statistics, the run's recorded stream ('' = not recorded)
# ARGV: score, scored, event, score ttl, group, entry id, maxlen, reply ttl, n statistics fields, statistics ttl,
# recorded maxlen, recorded ttl, then n pairs of statistics field and increment, then usage field, increment, ...
_COMMIT = """
if KEYS[5] ~= '' then
  local held = redis.call('TYPE', KEYS[5])['ok']
  if held ~= 'none' and held ~= 'stream' then
    return redis.error_reply('BADREPLY reply_to ' .. KEYS[5] .. ' holds a ' .. held .. ', not a stream')
  end
end
local stored = redis.call('GET', KEYS[1])
local score = stored or ARGV[1]
if not stored then
  redis.call('SET', KEYS[1], score, 'EX', ARGV[4])
  if KEYS[2] ~= '' then redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', '__data__', ARGV[2]) end
  if KEYS[8] ~= '' then
    redis.call('XADD', KEYS[8], 'MAXLEN', '~', ARGV[11], '*', '__data__', ARGV[2])
    redis.call('EXPIRE', KEYS[8], ARGV[12])
  end
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', '__data__', ARGV[3])
  for i = 13, 12 + 2 * ARGV[9], 2 do
    redis.call('HINCRBYFLOAT', KEYS[7], ARGV[i], ARGV[i + 1])
  end
  if ARGV[9] ~= '0' then
    redis.call('EXPIRE', KEYS[7], ARGV[10])
  end
end
if KEYS[5] ~= '' then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[7], '*', '__data__', score)
  redis.call('EXPIRE', KEYS[5], ARGV[8])
end
for i = 13 + 2 * ARGV[9], #ARGV, 2 do
  redis.call('HINCRBY', KEYS[6], ARGV[i], ARGV[i + 1])
end
redis.call('XACK', KEYS[4], ARGV[5], ARGV[6])
return stored
"""


class Effects:
    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        group: str,
        *,
        score_ttl_s: int,
        stats_ttl_s: int,
        maxlen: int,
        reply_ttl_s: int,
        record_maxlen: int = 0,
        record_ttl_s: int = 0,
    ) -> None:
        self.keys = keys
        self.group = group
        self.score_ttl_s = score_ttl_s
        self.stats_ttl_s = stats_ttl_s
        self.record_maxlen, self.record_ttl_s = record_maxlen, record_ttl_s
        self.maxlen = maxlen
        self.reply_ttl_s = reply_ttl_s
        self._commit = redis.register_script(_COMMIT)

    async def commit(
        self,
        entry_id: bytes,
        rollout: Rollout,
        score: Score,
        event: Event,
        usage: Mapping[str, int],
        *,
        analyze: bool = True,
    ) -> bool:
        """Write the effects of scoring `rollout`; False if it already had a score.

        `usage` (common.usage.increments) is added to the run's usage either way: the judge call was made.
        `analyze`: hand the rollout to the analyzers (the memory loop).

        Raises Rejected, having written nothing, if its reply_to names a key that is not a stream.
        """
        scored = ScoredRollout(rollout=rollout, score=score)
        keys = [
            self.keys.score(rollout.run_id, rollout.rollout_id),
            self.keys.scored if analyze else "",
            self.keys.events,
            self.keys.rollouts,
            rollout.reply_to or "",
            self.keys.usage(rollout.run_id),
            self.keys.class_stats(rollout.run_id, rollout.step),
            self.keys.recorded(rollout.run_id) if self.record_maxlen else "",
        ]
        stats = stats_increments(score)
        args: list[bytes | str | int] = [
            wire.encode(score),
            wire.encode(scored),
            wire.encode(event),
            self.score_ttl_s,
            self.group,
            entry_id,
            self.maxlen,
            self.reply_ttl_s,
            len(stats),
            self.stats_ttl_s,
            self.record_maxlen,
            self.record_ttl_s,
            *(x for field, n in stats.items() for x in (field, repr(n))),
            *(x for field, n in usage.items() for x in (field, n)),
        ]
        try:
            stored = await self._commit(keys=keys, args=args)
        except ResponseError as e:
            if str(e).startswith("BADREPLY"):
                raise Rejected(str(e).removeprefix("BADREPLY ")) from None
            raise
        return stored is None
