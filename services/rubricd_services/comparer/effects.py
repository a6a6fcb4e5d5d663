"""Writing a preference's effects, and acking its comparison, as one atomic step.

One Lua script stores the Preference (only if the comparison has none yet),
appends the comparison with it to the run's kept comparisons (Keys.preferences,
what `rubricd export` reads; and the prompt of its rubric set's instance,
Keys.instance_prompts), adds it to the run's judge accuracy
(Keys.accuracy, rubricd.accuracy.accuracy_increments; only with the first
Preference, so the counts are exactly what the committed preferences imply),
logs the event, replies to the publisher, adds the judge calls to the run's
usage and acks the entry. Either all of that happens or none of it (what could
fail midway, a reply key that is not a stream, is checked before the first
write), and a comparison judged twice (redelivered, or published again) always
replies with its first Preference.
"""

from collections.abc import Mapping

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rubricd import wire
from rubricd.accuracy import accuracy_increments
from rubricd.keys import Keys
from rubricd.messages import Comparison, Event, JudgedComparison, Preference
from rubricd_services.common.streams import Rejected

# KEYS: preference, the run's kept comparisons, events stream, comparisons stream, reply stream ('' = none),
# the run's usage, the run's accuracy, the run's instance prompts
# ARGV: preference, judged comparison, event, preference ttl, group, entry id, maxlen, reply ttl, kept maxlen,
# kept ttl, instance key ('' = none), prompt, n accuracy fields, then n pairs of accuracy field and increment,
# then usage field, increment, ...
_COMMIT = """
if KEYS[5] ~= '' then
  local held = redis.call('TYPE', KEYS[5])['ok']
  if held ~= 'none' and held ~= 'stream' then
    return redis.error_reply('BADREPLY reply_to ' .. KEYS[5] .. ' holds a ' .. held .. ', not a stream')
  end
end
local stored = redis.call('GET', KEYS[1])
local preference = stored or ARGV[1]
if not stored then
  redis.call('SET', KEYS[1], preference, 'EX', ARGV[4])
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], '*', '__data__', ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[10])
  if ARGV[11] ~= '' then
    redis.call('HSETNX', KEYS[8], ARGV[11], ARGV[12])
    redis.call('EXPIRE', KEYS[8], ARGV[10])
  end
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', '__data__', ARGV[3])
  for i = 14, 13 + 2 * ARGV[13], 2 do
    redis.call('HINCRBY', KEYS[7], ARGV[i], ARGV[i + 1])
  end
end
if KEYS[5] ~= '' then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[7], '*', '__data__', preference)
  redis.call('EXPIRE', KEYS[5], ARGV[8])
end
for i = 14 + 2 * ARGV[13], #ARGV, 2 do
  redis.call('HINCRBY', KEYS[6], ARGV[i], ARGV[i + 1])
end
redis.call('XACK', KEYS[4], ARGV[5], ARGV[6])
return stored
"""


class PreferenceEffects:
    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        group: str,
        *,
        preference_ttl_s: int,
        maxlen: int,
        reply_ttl_s: int,
        kept_maxlen: int,
        kept_ttl_s: int,
    ) -> None:
        self.keys = keys
        self.group = group
        self.preference_ttl_s = preference_ttl_s
        self.maxlen = maxlen
        self.reply_ttl_s = reply_ttl_s
        self.kept_maxlen = kept_maxlen
        self.kept_ttl_s = kept_ttl_s
        self._commit = redis.register_script(_COMMIT)

    async def commit(
        self,
        entry_id: bytes,
        comparison: Comparison,
        preference: Preference,
        event: Event,
        usage: Mapping[str, int],
    ) -> bool:
        """Write the effects of judging `comparison`; False if it already had a Preference.

        `usage` (common.usage.increments) is added to the run's usage either way: the judge calls were made.

        Raises Rejected, having written nothing, if its reply_to names a key that is not a stream.
        """
        judged = JudgedComparison(comparison=comparison, preference=preference)
        keys = [
            self.keys.preference(comparison.run_id, comparison.comparison_id),
            self.keys.preferences(comparison.run_id),
            self.keys.events,
            self.keys.comparisons,
            comparison.reply_to or "",
            self.keys.usage(comparison.run_id),
            self.keys.accuracy(comparison.run_id),
            self.keys.instance_prompts(comparison.run_id),
        ]
        counts = accuracy_increments(preference)
        args: list[bytes | str | int] = [
            wire.encode(preference),
            wire.encode(judged),
            wire.encode(event),
            self.preference_ttl_s,
            self.group,
            entry_id,
            self.maxlen,
            self.reply_ttl_s,
            self.kept_maxlen,
            self.kept_ttl_s,
            preference.instance_key or "",
            comparison.prompt,
            len(counts),
            *(x for name, n in counts.items() for x in (name, n)),
            *(x for name, n in usage.items() for x in (name, n)),
        ]
        try:
            stored = await self._commit(keys=keys, args=args)
        except ResponseError as e:
            if str(e).startswith("BADREPLY"):
                raise Rejected(str(e).removeprefix("BADREPLY ")) from None
            raise
        return stored is None
