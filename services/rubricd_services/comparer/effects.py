"""Writing a preference's effects, and acking its comparison, as one atomic step.

One Lua script stores the Preference (only if the comparison has none yet), keeps the comparison for
`rubricd export`, adds it to the run's judge accuracy (with the first Preference only), logs, replies, adds
the usage and acks: all of it or none, and a comparison judged twice always replies with its first Preference.
What is kept: docs/researchers/rubric-arm.md, "Accuracy" and "Training records".
"""

from collections.abc import Mapping

from redis.asyncio import Redis

from rubricd import wire
from rubricd.accuracy import accuracy_increments
from rubricd.keys import Keys
from rubricd.messages import Comparison, Event, JudgedComparison, Preference
from rubricd_services.common.commit import Script
from rubricd_services.common.keeping import Keeping

# An optional key or argument is '': `kept` (kept_maxlen 0), `reply` (no reply_to), `instance` (a rubric set without
# an instance).
_COMMIT = Script(
    keys="preference kept events comparisons reply usage accuracy instance_prompts",
    args="preference judged event answer_ttl group entry_id maxlen reply_ttl kept_maxlen kept_ttl instance prompt",
    maps="accuracy usage",
    reply="reply",
    body="""
local stored = redis.call('GET', k_preference)
local preference = stored or a_preference
if not stored then
  redis.call('SET', k_preference, preference, 'EX', a_answer_ttl)
  if k_kept ~= '' then
    append(k_kept, a_kept_maxlen, a_judged)
    redis.call('EXPIRE', k_kept, a_kept_ttl)
  end
  if a_instance ~= '' then
    redis.call('HSETNX', k_instance_prompts, a_instance, a_prompt)
    redis.call('EXPIRE', k_instance_prompts, a_kept_ttl)
  end
  append(k_events, a_maxlen, a_event)
  hincrby(k_accuracy, m_accuracy)
end
reply(k_reply, a_maxlen, preference, a_reply_ttl)
hincrby(k_usage, m_usage)
ack(k_comparisons, a_group, a_entry_id)
return stored
""",
)


class Effects:
    def __init__(self, redis: Redis, keys: Keys, group: str, keeping: Keeping) -> None:
        self.keys, self.group, self.keeping = keys, group, keeping
        self._commit = _COMMIT.register(redis)

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
        stored = await self._commit(
            keys={
                "preference": self.keys.preference(comparison.run_id, comparison.comparison_id),
                "kept": self.keeping.kept(self.keys.kept_comparisons(comparison.run_id)),
                "events": self.keys.events,
                "comparisons": self.keys.comparisons,
                "reply": comparison.reply_to or "",
                "usage": self.keys.usage(comparison.run_id),
                "accuracy": self.keys.accuracy(comparison.run_id),
                "instance_prompts": self.keys.instance_prompts(comparison.run_id),
            },
            args={
                "preference": wire.encode(preference),
                "judged": wire.encode(JudgedComparison(comparison=comparison, preference=preference)),
                "event": wire.encode(event),
                "group": self.group,
                "entry_id": entry_id,
                **self.keeping.args,
                "instance": preference.instance_key or "",
                "prompt": comparison.prompt,
            },
            maps={"accuracy": accuracy_increments(preference), "usage": usage},
        )
        return stored is None
