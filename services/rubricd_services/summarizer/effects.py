"""The summarizer's atomic Redis writes: what a step expects, what has arrived, who summarizes it.

Every change is one Lua script, so a step's state survives any crash whole: `closed` and `analyzed` record
what the trainer and the analyzers sent (and ack it), and open the step with its deadline; the open steps are a
gathering (runtime.gathering, `steps`) whose claim gives one summarizer a step while it works, and `commit`
publishes the summaries exactly once however many summarizers raced or restarted.
When a step is complete, claims, parts, expiry and the step hash's fields: docs/researchers/amaris.md, "Steps".
"""

import json
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import AnalysisSample, Event, RolloutAnalysis, StepClosed, StepSample, StepSummary
from rubricd_services.runtime.commit import Script
from rubricd_services.runtime.gathering import CLOCK, Gathering, Lua

# A step's first closure opens it: it waits among the open steps until its deadline (Redis's clock, like its claim).
_OPEN = """\
local function open_step()
  if redis.call('HSETNX', k_step, 'closed_at', now) == 1 then
    local deadline = now + tonumber(a_deadline_s)
    redis.call('HSET', k_step, 'deadline', deadline)
    redis.call('ZADD', k_open_steps, deadline, a_member)
  end
end
"""

# A StepClosed: one part of the step (`part`), one closer's (`closer`: the step is quiet `quiet_s` after its last new
# closer), or the whole step; `part_json` a part's or a closer's {"expected", "ids"}, its first closure's.
_CLOSED = Script(
    keys="step open_steps steps",
    args="expected ids deadline_s member consumer_group entry_id ttl part parts closer quiet_s part_json",
    body=CLOCK
    + _OPEN
    + """
if redis.call('HGET', k_step, 'summarized') ~= '1' then
  if a_part ~= '' then
    redis.call('HSETNX', k_step, 'parts', a_parts)
    redis.call('HSETNX', k_step, 'part:' .. a_part, a_part_json)
  elseif a_closer ~= '' then
    if redis.call('HSETNX', k_step, 'closer:' .. a_closer, a_part_json) == 1 then
      redis.call('HSET', k_step, 'quiet_at', now + tonumber(a_quiet_s))
    end
  else
    if a_expected ~= '' then redis.call('HSET', k_step, 'expected', a_expected) end
    if a_ids ~= '[]' then redis.call('HSET', k_step, 'rollout_ids', a_ids) end
  end
  open_step()
  redis.call('EXPIRE', k_step, a_ttl)
end
ack(k_steps, a_consumer_group, a_entry_id)
return 1
""",
)

# An analysis: `rollouts_per_step` ('' = none) closes the step itself; a step no closure has closed is due
# `unclosed_s` after its latest analysis (its trainer's processes may end without closing it); `entry_id` '' acks
# nothing.
_ANALYZED = Script(
    keys="step step_analyses open_steps analyses",
    args="rollout_id rollouts_per_step deadline_s member consumer_group entry_id ttl unclosed_s",
    body=CLOCK
    + _OPEN
    + """
redis.call('SADD', k_step_analyses, a_rollout_id)
redis.call('EXPIRE', k_step_analyses, a_ttl)
redis.call('EXPIRE', k_step, a_ttl)
if a_rollouts_per_step ~= '' and redis.call('HGET', k_step, 'summarized') ~= '1'
    and redis.call('HEXISTS', k_step, 'expected') == 0 then
  redis.call('HSET', k_step, 'expected', a_rollouts_per_step)
  open_step()
end
if redis.call('HEXISTS', k_step, 'closed_at') == 0 and redis.call('HEXISTS', k_step, '~claimed') == 0
    and redis.call('HGET', k_step, 'summarized') ~= '1' then
  redis.call('HSET', k_step, 'analysed_at', now)
  redis.call('EXPIRE', k_step, a_ttl)
  redis.call('ZADD', k_open_steps, now + tonumber(a_unclosed_s), a_member)
end
if a_entry_id ~= '' then ack(k_analyses, a_consumer_group, a_entry_id) end
return 1
""",
)

# The decision on a claimed step (runtime.gathering): it is marked summarized and its summaries published.
_SUMMARIZED = Lua(
    keys="summaries events step_analyses",
    args="maxlen event",
    lists="summaries",
    body="""
redis.call('HSET', k_gathering, 'summarized', '1', 'summarized_at', now)
redis.call('EXPIRE', k_step_analyses, a_ttl)
for _, summary in ipairs(l_summaries) do append(k_summaries, a_maxlen, summary) end
append(k_events, a_maxlen, a_event)
""",
)


@dataclass(frozen=True)
class StepState:
    """One step's accounting, as read from Redis."""

    run_id: str
    step: int
    expected: int | None = None
    rollout_ids: tuple[str, ...] = ()
    summarized: bool = False
    analyzed: frozenset[str] = field(default_factory=frozenset)
    given_up: frozenset[str] = field(default_factory=frozenset)  # rollouts whose analysis was dead-lettered
    unsampled: Mapping[str, str] = field(default_factory=dict)  # rollouts the analysis sample left out -> its rule
    closed_at: float | None = None
    parts: int | None = None  # closed in parts: how many
    parts_in: int = 0  # and how many of them are in
    closers: int = 0  # closed by closers that could not name their part: how many
    quiet_at: float | None = None  # then: when it is quiet, if no other closer closes it (Redis's clock)
    now: float = 0.0  # Redis's clock when this was read

    @property
    def closed(self) -> bool:
        return self.closed_at is not None or self.expected is not None

    @property
    def missing_parts(self) -> int:
        return max(0, (self.parts or 0) - self.parts_in)

    @property
    def complete(self) -> bool:
        """Every part is in, and every analysis the trainer announced is in or given up on (never, for a closure
        that gave no count: its deadline decides)."""
        if self.missing_parts or (self.quiet_at is not None and self.now < self.quiet_at):
            return False
        settled = self.analyzed | self.given_up | self.unsampled.keys()
        if self.rollout_ids:
            return self.closed and set(self.rollout_ids) <= settled
        return self.expected is not None and len(settled) >= self.expected

    @property
    def missing(self) -> tuple[str, ...]:
        """Rollout ids announced but neither analyzed nor left out by the analysis sample (only knowable when the
        trainer sent ids)."""
        return tuple(sorted(set(self.rollout_ids) - self.analyzed - self.unsampled.keys()))

    def sample(self, analyzed: Collection[str]) -> StepSample | None:
        """What the analysis sample read of the step, given the rollouts whose analyses are in: None if it left
        none out. Its rule: the one that left out the most (rollouts of a run normally share one)."""
        if not self.unsampled:
            return None
        rules = Counter(self.unsampled.values()).most_common()
        rule: AnalysisSample = int(rules[0][0]) if rules[0][0].isdigit() else cast(AnalysisSample, rules[0][0])
        scored = set(analyzed) | self.given_up | self.unsampled.keys()
        return StepSample(rule=rule, analyzed=len(analyzed), scored=len(scored))


def added(closures: list[dict[str, Any]]) -> tuple[int | None, tuple[str, ...]]:
    """The sum of closures' counts and the union of their ids: a count, or ids, only where every closure gave them."""
    counts = [c["expected"] for c in closures]
    expected = sum(counts) if closures and None not in counts else None
    ids = tuple(sorted({i for c in closures for i in c["ids"]})) if all(c["ids"] for c in closures) else ()
    return expected, ids


def member(run_id: str, step: int) -> str:
    return f"{run_id}|{step}"


def parse_member(raw: bytes | str) -> tuple[str, int]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    run_id, _, step = text.rpartition("|")
    return run_id, int(step)


class Effects:
    """The summarizer's view of every step's accounting; its steps' claims and decisions are a gathering's."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        consumer_group: str,
        consumer: str,
        *,
        deadline_s: float,
        claim_ttl_s: float,
        maxlen: int,
        quiet_s: float = 5.0,
        unclosed_s: float = 600.0,
        state_ttl_s: int = 7 * 86_400,
    ) -> None:
        self.redis = redis
        self.quiet_s, self.unclosed_s = quiet_s, unclosed_s
        self.state_ttl_s = state_ttl_s
        self.keys = keys
        self.consumer_group = consumer_group
        self.deadline_s = deadline_s
        self.maxlen = maxlen
        self._closed = _CLOSED.register(redis)
        self._analyzed = _ANALYZED.register(redis)
        self.steps = Gathering(
            redis,
            keys.open_steps,
            consumer,
            lease_s=claim_ttl_s,
            ttl_s=state_ttl_s,
            key=lambda name: keys.step(*parse_member(name)),
            decision=_SUMMARIZED,
        )

    async def closed(self, msg: StepClosed, entry_id: bytes | str) -> None:
        """Record the trainer's StepClosed (the whole step, or one part of it) and ack its entry."""
        expected = msg.rollouts if msg.rollouts is not None else (len(msg.rollout_ids) if msg.rollout_ids else None)
        ids = sorted(set(msg.rollout_ids))
        await self._closed(
            keys={
                "step": self.keys.step(msg.run_id, msg.step),
                "open_steps": self.keys.open_steps,
                "steps": self.keys.steps,
            },
            args={
                "expected": "" if expected is None else expected,
                "ids": json.dumps(ids),
                "deadline_s": self.deadline_s,
                "member": member(msg.run_id, msg.step),
                "consumer_group": self.consumer_group,
                "entry_id": entry_id,
                "ttl": self.state_ttl_s,
                "part": "" if msg.part is None else msg.part,
                "parts": msg.parts or "",
                "closer": msg.closer or "",
                "quiet_s": self.quiet_s,
                "part_json": json.dumps({"expected": expected, "ids": ids}),
            },
        )

    async def analyzed(self, analysis: RolloutAnalysis, entry_id: bytes | str, rollouts_per_step: int | None) -> None:
        """Count an announced analysis in its step and ack its entry."""
        run, step = analysis.run_id, analysis.step
        await self._analyzed(
            keys={
                "step": self.keys.step(run, step),
                "step_analyses": self.keys.step_analyses(run, step),
                "open_steps": self.keys.open_steps,
                "analyses": self.keys.analyses,
            },
            args={
                "rollout_id": analysis.rollout_id,
                "rollouts_per_step": rollouts_per_step or "",
                "deadline_s": self.deadline_s,
                "member": member(run, step),
                "consumer_group": self.consumer_group,
                "entry_id": entry_id,
                "ttl": self.state_ttl_s,
                "unclosed_s": self.unclosed_s,
            },
        )

    async def state(self, run_id: str, step: int) -> StepState:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.step(run_id, step))
            pipe.smembers(self.keys.step_analyses(run_id, step))
            pipe.smembers(self.keys.step_given_up(run_id, step))
            pipe.hgetall(self.keys.step_unsampled(run_id, step))
            pipe.time()
            raw, analyzed, given_up, unsampled, (seconds, micros) = await pipe.execute()
        h = {k.decode(): v.decode() for k, v in raw.items()}
        expected, ids = (int(h["expected"]) if "expected" in h else None), tuple(json.loads(h.get("rollout_ids", "[]")))
        parts = [json.loads(v) for k, v in h.items() if k.startswith("part:")]
        closers = [json.loads(v) for k, v in h.items() if k.startswith("closer:")]
        if "parts" in h:  # closed in parts: their sum and union (a count or ids only where every part gave them)
            expected, ids = added(parts)
        elif closers:  # by closers: theirs, never less than a closure of the whole step said
            summed, union = added(closers)
            expected = None if summed is None else max(summed, expected or 0)
            ids = tuple(sorted({*union, *ids})) if union else ()
        return StepState(
            run_id=run_id,
            step=step,
            expected=expected,
            rollout_ids=ids,
            parts=int(h["parts"]) if "parts" in h else None,
            parts_in=len(parts),
            summarized=h.get("summarized") == "1",
            analyzed=frozenset(x.decode() for x in analyzed),
            given_up=frozenset(x.decode() for x in given_up),
            unsampled={k.decode(): v.decode() for k, v in unsampled.items()},
            closed_at=float(h["closed_at"]) if "closed_at" in h else None,
            closers=len(closers),
            quiet_at=float(h["quiet_at"]) if "quiet_at" in h else None,
            now=int(seconds) + int(micros) / 1e6,
        )

    async def open_steps(self) -> list[tuple[str, int]]:
        members = cast(list[bytes], await self.redis.zrange(self.keys.open_steps, 0, -1))
        return [parse_member(m) for m in members]

    async def commit(self, run_id: str, step: int, summaries: list[StepSummary], event: Event) -> bool:
        """Mark the claimed step summarized and publish its summaries, unless it already was; True if this call
        did."""
        return await self.steps.decide(
            member(run_id, step),
            keys={
                "summaries": self.keys.summaries,
                "events": self.keys.events,
                "step_analyses": self.keys.step_analyses(run_id, step),
            },
            args={"maxlen": self.maxlen, "event": wire.encode(event)},
            lists={"summaries": [wire.encode(s) for s in summaries]},
        )
