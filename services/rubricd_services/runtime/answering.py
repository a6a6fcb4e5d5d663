"""The answering worker of the services a publisher waits on (scorer, comparer, arm): one runtime, one commit.

`Answering.handle` takes a request entry in (`intake`: rejected and counted if it can never be answered as sent),
replies the stored answer's bytes to a request answered before (no judging), else asks the service's `answer` and
commits it, and logs. A service subclasses it for one `Family` (what it takes and keeps, below) and supplies
`answer` (an `Answered`: the answer with its event, usage and the service's own script values), `rejected`,
`observe` and `refused`; the scorer also `prepare` (to read keys of its own in the stored answer's round trip) and
`check`. Its commit is `script`'s one Lua body: store the answer once (its run in the runs index), reply, keep the
request with its answer, log the event, add the usage, ack; the service's own keys, arguments and maps go beside
(`ScriptValues`). How: docs/development.md, "The answering runtime".
"""

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, cast

from faststream.redis.message import RedisStreamMessage
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import ARM, COMPARERS, SCORERS, Keys
from rubricd.messages import (
    ArmRollout,
    Comparison,
    Event,
    EventKind,
    JudgedComparison,
    JudgeStatus,
    Message,
    PublishedRollout,
    RewardedArmRollout,
    Rollout,
    ScoredRollout,
)
from rubricd_services.runtime import events
from rubricd_services.runtime.commit import Names, Script, Value, split
from rubricd_services.runtime.events import Events
from rubricd_services.runtime.intake import Addressed, Intake, Rejected, Sender, entry_id


class Settings(Protocol):
    """An answering service's (AnswerSettings and ServiceSettings): its commits keep the answer for redelivery,
    reply on a stream that expires when idle, keep the run's last requests with their answers (kept_maxlen 0:
    none) and cap the streams they append to, under the same names in all three services."""

    answer_ttl_s: int
    reply_ttl_s: int
    kept_maxlen: int
    kept_ttl_s: int
    stream_maxlen: int


M = TypeVar("M", bound=Message)  # the request: Rollout, Comparison, ArmRollout
A = TypeVar("A", bound=Message)  # its answer: Score, Preference, ArmReward

log = logging.getLogger("rubricd.answering")


@dataclass(frozen=True)
class Family:
    """What an answering service takes and keeps, each declared: its name, the request (its type, its id field, its
    name in reasons and logs, the setting that caps its size), the requests' stream (a Keys attribute) and consumer
    group, the answer's key and the kept requests' key (Keys methods), the request kept with its answer (a Struct
    of the two, in that order); and the request as taken in from its publisher, where that is stricter than as kept
    (`taken_as`: the scorer refuses a rollout's unknown fields)."""

    service: str
    request: type[Message]
    id_field: str
    what: str
    max_bytes_setting: str
    stream: str
    consumer_group: str
    stored: Callable[[Keys, str, str], str]
    kept: Callable[[Keys, str], str]
    kept_as: type[Message]
    taken_as: type[Message] | None = None

    def keep(self, request: Message, answer: Message) -> Message:
        """The request with its answer, as kept (the kept Struct's two fields, in that order)."""
        request_field, answer_field = self.kept_as.__struct_fields__
        return self.kept_as(**{request_field: request, answer_field: answer})

    def event(self, request: Message, kind: EventKind, detail: str, **fields: Any) -> Event:
        """The service's event about `request`: its run, step and id, and `fields`."""
        sent = cast(Addressed, request)
        ids = {"run_id": sent.run_id, "step": sent.step, self.id_field: getattr(request, self.id_field)}
        return events.event(self.service, kind, **ids, detail=detail, **fields)

    def rejection(self, answer: type[A], sender: Sender, reason: str, **fields: Any) -> A:
        """A rejected `answer` to `sender` (its ids), saying why, with `fields`."""
        ids = {"run_id": sender.run_id, self.id_field: sender.id, "step": sender.step}
        return answer(**ids, status=JudgeStatus.REJECTED, error=reason, **fields)


ROLLOUTS = Family(
    service="scorer",
    request=Rollout,
    id_field="rollout_id",
    what="rollout",
    max_bytes_setting="max_rollout_bytes",
    stream="rollouts",
    consumer_group=SCORERS,
    stored=Keys.score,
    kept=Keys.kept_rollouts,
    kept_as=ScoredRollout,
    taken_as=PublishedRollout,
)
COMPARISONS = Family(
    service="comparer",
    request=Comparison,
    id_field="comparison_id",
    what="comparison",
    max_bytes_setting="max_comparison_bytes",
    stream="comparisons",
    consumer_group=COMPARERS,
    stored=Keys.preference,
    kept=Keys.kept_comparisons,
    kept_as=JudgedComparison,
)
ARM_ROLLOUTS = Family(
    service="arm",
    request=ArmRollout,
    id_field="rollout_id",
    what="arm rollout",
    max_bytes_setting="max_arm_rollout_bytes",
    stream="arm",
    consumer_group=ARM,
    stored=Keys.arm_reward,
    kept=Keys.kept_arm_rollouts,
    kept_as=RewardedArmRollout,
)

# The one body: `with_first` runs with the first answer only (and may read `now`, Redis's clock in seconds),
# `every_time` with every commit (the service's own effects). An optional key is '': `kept` (kept_maxlen 0),
# `reply` (no reply_to). `replay` '1': `answer` holds the stored answer's bytes, to reply again without storing
# anything.
_BODY = """
local stored = redis.call('GET', k_answer)
local answer = stored or a_answer
if not stored and a_replay == '' then
  redis.call('SET', k_answer, answer, 'EX', a_answer_ttl)
  if k_kept ~= '' then
    append(k_kept, a_kept_maxlen, a_kept)
    redis.call('EXPIRE', k_kept, a_kept_ttl)
  end
  append(k_events, a_maxlen, a_event)
  local now = tonumber(redis.call('TIME')[1])
  redis.call('ZADD', k_runs, now, a_run)
{with_first}
end
reply(k_reply, a_maxlen, answer, a_reply_ttl)
hincrby(k_usage, m_usage)
{every_time}
if a_entry_id ~= '' then ack(k_requests, a_consumer_group, a_entry_id) end
return stored
"""
_KEYS = ("answer", "kept", "events", "requests", "reply", "usage", "runs")
_ARGS = tuple(
    "answer kept event replay run consumer_group entry_id answer_ttl reply_ttl kept_maxlen kept_ttl maxlen".split()
)


def script(
    *, keys: Names = (), args: Names = (), maps: Names = (), with_first: str = "", every_time: str = ""
) -> Script:
    """The commit script of an answering service: the one body, with the service's own `keys`, `args` and `maps`
    (bound as `k_`, `a_`, `m_<name>`), written by its Lua `with_first` (the first answer only) and `every_time`."""
    return Script(
        body=_BODY.format(with_first=with_first.strip("\n"), every_time=every_time.strip("\n")),
        keys=_KEYS + split(keys),
        args=_ARGS + split(args),
        maps=("usage", *split(maps)),
        reply="reply",
    )


@dataclass(frozen=True)
class ScriptValues:
    """A service's own part of a commit: the values of the keys, arguments and maps its `script` declares."""

    keys: Mapping[str, str] = field(default_factory=dict)
    args: Mapping[str, Value] = field(default_factory=dict)
    maps: Mapping[str, Mapping[str, Value]] = field(default_factory=dict)


@dataclass(frozen=True)
class Answered(Generic[A]):
    """A service's answer to one request, with its event (logged with the first answer only, `Family.event`), the
    judge calls' usage (added to the run's, answer stored or not) and its own part of the commit."""

    answer: A
    event: Event
    usage: Mapping[str, int] = field(default_factory=dict)
    values: ScriptValues = ScriptValues()


Read = bytes | str | None  # a value read from Redis


@dataclass(frozen=True)
class Prepared(Generic[A]):
    """A service's answer, ready to make: the keys it reads in the stored answer's round trip (the judge cache's
    verdict), and the answer given their values."""

    reads: tuple[str, ...]
    answer: Callable[[Sequence[Read]], Awaitable[Answered[A]]]


class Answering(Generic[M, A]):
    """The loop of an answering service: take, reject (counted), replay, answer, commit, log."""

    def __init__(self, family: Family, script: Script, settings: Settings, redis: Redis, keys: Keys) -> None:
        self.family, self.redis, self.keys = family, redis, keys
        self.maxlen, self.kept_maxlen = settings.stream_maxlen, settings.kept_maxlen
        self.events = Events(redis, keys, settings.stream_maxlen)
        # the commits' arguments of what is kept for how long, made once (the scorer's reply path)
        self._keeping: dict[str, Value] = {
            "answer_ttl": settings.answer_ttl_s,
            "reply_ttl": settings.reply_ttl_s,
            "kept_maxlen": settings.kept_maxlen,
            "kept_ttl": settings.kept_ttl_s,
            "maxlen": settings.stream_maxlen,
        }
        self.intake: Intake[M] = Intake(
            type=cast(type[M], family.taken_as or family.request),
            what=family.what,
            id_field=family.id_field,
            max_bytes=getattr(settings, family.max_bytes_setting),
            max_bytes_setting=family.max_bytes_setting,
            keys=keys,
            reply_ttl_s=settings.reply_ttl_s,
            answer=self.rejected,
            check=self.check,
        )
        self._commit = script.register(redis)
        self._own = script.keys[len(_KEYS) :], script.args[len(_ARGS) :], script.maps[1:]

    # What a service supplies.

    async def answer(self, request: M) -> Answered[A]:
        """The service's answer to a request not answered before, as data: with its event, usage and script values;
        Rejected (`intake.refuse`) if it can never be answered as sent. Any other error leaves the entry pending,
        for a reclaim to retry."""
        raise NotImplementedError

    async def prepare(self, request: M) -> Prepared[A]:
        """The answer to come, with the keys to read beside the stored answer (by default none, then `answer`):
        a key the service would read anyway costs no round trip of its own. Raises as `answer` does."""
        return Prepared((), lambda _: self.answer(request))

    def rejected(self, sender: Sender, reason: str, request: M | None) -> Message:
        """The answer to a request that can never be answered as sent (`Family.rejection`: its ids the sender's;
        `request` given when it was taken in, then refused)."""
        raise NotImplementedError

    def check(self, request: M) -> None:
        """Raise Rejected for what the request's schema cannot say."""

    async def observe(self, request: M, answer: A) -> None:
        """After a new answer was committed: the service's figures."""

    def refused(self, request: M | None) -> None:
        """A rejected request (None: not taken in), to count."""

    # The loop.

    async def handle(self, msg: RedisStreamMessage) -> None:
        """FastStream's handler of a request entry."""
        await self.respond(entry_id(msg), self.take(msg.body))

    def take(self, body: bytes) -> M:
        """The request, or Rejected (counted, with a rejected answer for its publisher if it said where)."""
        try:
            return self.intake.take(body)
        except Rejected:
            self.refused(None)
            raise

    async def respond(self, entry_id: bytes, request: M) -> None:
        """Answer a request taken in: its first answer again if it has one, else a new one, committed."""
        try:
            prepared = await self.prepare(request)
            stored, *read = await self.redis.mget([self.stored(request), *prepared.reads])
            answered = None if stored is not None else await prepared.answer(read)
        except Rejected:
            self.refused(request)
            raise
        if answered is None:  # published again, or redelivered after its commit: its first answer, as stored
            await self.replay(entry_id, request, cast(bytes, stored))
        else:
            await self.commit_answer(entry_id, request, answered)

    async def commit_answer(self, entry_id: bytes, request: M, answered: Answered[A]) -> bool:
        """Commit a new answer (`entry_id` b"": its entry was acked already); False if the request had one (its
        first is replied). Raises Rejected, having written nothing, if its reply_to names a key that is not a
        stream."""
        answer = answered.answer
        written: dict[str, Value] = {
            "answer": wire.encode(answer),
            "kept": wire.encode(self.family.keep(request, answer)),
            "event": wire.encode(answered.event),
            "replay": "",
        }
        if await self._run(entry_id, request, written, answered.usage, answered.values) is not None:
            self.replied(request)
            return False
        await self.observe(request, answer)
        return True

    async def replay(self, entry_id: bytes, request: M, stored: bytes | str) -> None:
        """Reply the stored answer's bytes again, and ack: nothing else is written."""
        replayed: dict[str, Value] = {"answer": stored, "kept": "", "event": "", "replay": "1"}
        await self._run(entry_id, request, replayed, {}, ScriptValues())
        self.replied(request)

    async def _run(
        self, entry_id: bytes, request: M, args: dict[str, Value], usage: Mapping[str, int], own: ScriptValues
    ) -> Any:
        keys, own_args, maps = self._own
        sent = cast(Addressed, request)
        return await self._commit(
            keys={
                "answer": self.stored(request),
                "kept": self.family.kept(self.keys, sent.run_id) if self.kept_maxlen else "",
                "events": self.keys.events,
                "requests": getattr(self.keys, self.family.stream),
                "reply": sent.reply_to or "",
                "usage": self.keys.usage(sent.run_id),
                "runs": self.keys.runs,
                **dict.fromkeys(keys, ""),
                **own.keys,
            },
            args={
                **args,
                "run": sent.run_id,
                "consumer_group": self.family.consumer_group,
                "entry_id": entry_id,
                **self._keeping,
                **dict.fromkeys(own_args, ""),
                **own.args,
            },
            maps={"usage": usage, **{name: {} for name in maps}, **own.maps},
        )

    def stored(self, request: M) -> str:
        """The key of the request's answer."""
        return self.family.stored(self.keys, cast(Addressed, request).run_id, getattr(request, self.family.id_field))

    async def publish(self, event: Event) -> None:
        """Log an event of the service's own (a reloaded rubric set, a judge's accuracy)."""
        await self.events.publish(event)

    def replied(self, request: M) -> None:
        f = self.family
        run_id, id_ = cast(Addressed, request).run_id, getattr(request, f.id_field)
        log.info("%s %s/%s was answered before; replied with its first answer", f.what, run_id, id_)
