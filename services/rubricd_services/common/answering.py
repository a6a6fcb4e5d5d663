"""The answering worker of the services a publisher waits on (scorer, comparer, arm): one runtime, one commit.

`Answering.handle` takes a request entry in (`intake`: rejected and counted if it can never be answered as sent),
replies the stored answer's bytes to a request answered before (no judging), else asks the service's `answer`
and commits it, and logs. A service subclasses it and supplies `answer` (and, optionally, `observe` and
`refused`), and declares what it answers in an `Answers`. Its commit is `script`'s one Lua body: store the answer
once, reply, keep the request with its answer, log the event, add the usage, ack; the service's own keys,
arguments and maps go beside (`Effects`). What is written: docs/development.md, "The answering runtime".
"""

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from faststream.redis.message import RedisStreamMessage
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Event, JudgeStatus, Message

from .commit import Names, Script, Value, split
from .intake import Addressed, Intake, Rejected, Sender, entry_id
from .keeping import Keeping

M = TypeVar("M", bound=Message)  # the request: Rollout, Comparison, ArmRollout
A = TypeVar("A", bound=Message)  # its answer: Score, Preference, ArmReward

log = logging.getLogger("rubricd.answering")

# The one body: `with_first` runs with the first answer only, `every_time` with every commit (the service's own
# effects). An optional key is '': `kept` (kept_maxlen 0), `reply` (no reply_to). `replay` '1': `answer` holds the
# stored answer's bytes, to reply again without storing anything.
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
{with_first}
end
reply(k_reply, a_maxlen, answer, a_reply_ttl)
hincrby(k_usage, m_usage)
{every_time}
if a_entry_id ~= '' then ack(k_requests, a_group, a_entry_id) end
return stored
"""
_KEYS = ("answer", "kept", "events", "requests", "reply", "usage")
_ARGS = tuple("answer kept event replay group entry_id answer_ttl reply_ttl kept_maxlen kept_ttl maxlen".split())


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
class Effects:
    """A service's own effects in a commit: the values of the keys, arguments and maps its `script` declares."""

    keys: Mapping[str, str] = field(default_factory=dict)
    args: Mapping[str, Value] = field(default_factory=dict)
    maps: Mapping[str, Mapping[str, Value]] = field(default_factory=dict)


@dataclass(frozen=True)
class Answered(Generic[A]):
    """A service's answer to one request, with the judge calls' usage (added to the run's, answer stored or not)
    and its own effects."""

    answer: A
    usage: Mapping[str, int] = field(default_factory=dict)
    effects: Effects = Effects()


@dataclass(frozen=True, kw_only=True)
class Answers(Generic[M, A]):
    """What a service answers, declared once: the request (its type, its id's field, the setting that caps its
    size, and the words of the logs), where its answer is stored and the request kept with it, the event, the
    rejected answer, and the commit script."""

    request: type[M]
    id_field: str  # "rollout_id"
    what: str  # "rollout", in reasons and logs
    done: str  # "scored": "rollout r1 was already scored"
    answer: str  # "score": "replied with its first score"
    max_bytes: tuple[str, int]  # the setting capping a request's size, and its value
    stream: Callable[[Keys], str]  # the requests' stream
    consumer_group: str
    stored: Callable[[Keys, M], str]  # the answer's key
    kept: Callable[[Keys, M], str]  # the run's kept requests with their answers
    keep: Callable[[M, A], Message]  # the request with its answer, as kept
    event: Callable[[M, A], Event]
    rejected: Callable[[Sender, str, M | None], A]  # the answer to a request that can never be answered as sent
    script: Script
    check: Callable[[M], None] | None = None  # raises Rejected for what the schema cannot say


class Answering(Generic[M, A]):
    """The loop of an answering service: take, reject (counted), replay, answer, commit, log. A service supplies
    `answer`; `observe` (its figures after a new answer) and `refused` (count a rejection) are optional."""

    def __init__(self, answers: Answers[M, A], redis: Redis, keys: Keys, keeping: Keeping) -> None:
        self.answers, self.redis, self.keys, self.keeping = answers, redis, keys, keeping
        setting, max_bytes = answers.max_bytes
        self.intake = Intake(
            type=answers.request,
            what=answers.what,
            id_field=answers.id_field,
            max_bytes=max_bytes,
            max_bytes_setting=setting,
            keys=keys,
            reply_ttl_s=keeping.reply_ttl_s,
            answer=answers.rejected,
            check=answers.check,
        )
        self._commit = answers.script.register(redis)
        self._own = answers.script.keys[len(_KEYS) :], answers.script.args[len(_ARGS) :], answers.script.maps[1:]

    async def answer(self, request: M) -> Answered[A]:
        """The service's answer to a request not answered before; Rejected (`intake.refuse`) if it can never be
        answered as sent. Any other error leaves the entry pending, for a reclaim to retry."""
        raise NotImplementedError

    async def observe(self, request: M, answer: A) -> None:
        """After a new answer was committed: the service's figures."""

    def refused(self, request: M | None) -> None:
        """A rejected request (None: not taken in), to count."""

    async def handle(self, msg: RedisStreamMessage) -> None:
        """FastStream's handler of a request entry."""
        await self.respond(entry_id(msg), self.take(msg.body))

    async def respond(self, entry_id: bytes, request: M) -> None:
        """Answer a request taken in: its first answer again if it has one, else a new one, committed."""
        stored: bytes | str | None = await self.redis.get(self.answers.stored(self.keys, request))
        if stored is not None:  # published again, or redelivered after its commit: its first answer, as stored
            await self.replay(entry_id, request, stored)
            return
        try:
            answered = await self.answer(request)
        except Rejected:
            self.refused(request)
            raise
        await self.commit_answer(entry_id, request, answered)

    def take(self, body: bytes) -> M:
        """The request, or Rejected (counted, with a rejected answer for its publisher if it said where)."""
        try:
            return self.intake.take(body)
        except Rejected:
            self.refused(None)
            raise

    async def commit_answer(self, entry_id: bytes, request: M, answered: Answered[A]) -> bool:
        """Commit a new answer (`entry_id` b"": its entry was acked already); False if the request had one (its
        first is replied). Raises Rejected, having written nothing, if its reply_to names a key that is not a
        stream."""
        answer, effects = answered.answer, answered.effects
        stored = await self._run(
            entry_id,
            request,
            {
                "answer": wire.encode(answer),
                "kept": wire.encode(self.answers.keep(request, answer)),
                "event": wire.encode(self.answers.event(request, answer)),
                "replay": "",
            },
            answered.usage,
            effects,
        )
        if stored is not None:
            self.log_replayed(request)
            return False
        await self.observe(request, answer)
        return True

    async def replay(self, entry_id: bytes, request: M, stored: bytes | str) -> None:
        """Reply the stored answer's bytes again, and ack: nothing else is written."""
        args: dict[str, Value] = {"answer": stored, "kept": "", "event": "", "replay": "1"}
        await self._run(entry_id, request, args, {}, Effects())
        self.log_replayed(request)

    async def _run(
        self, entry_id: bytes, request: M, args: dict[str, Value], usage: Mapping[str, int], effects: Effects
    ) -> Any:
        keys, own_args, maps = self._own
        sent = cast(Addressed, request)
        return await self._commit(
            keys={
                "answer": self.answers.stored(self.keys, request),
                "kept": self.keeping.kept(self.answers.kept(self.keys, request)),
                "events": self.keys.events,
                "requests": self.answers.stream(self.keys),
                "reply": sent.reply_to or "",
                "usage": self.keys.usage(sent.run_id),
                **{name: "" for name in keys},
                **effects.keys,
            },
            args={
                **args,
                "group": self.answers.consumer_group,
                "entry_id": entry_id,
                **self.keeping.args,
                **{name: "" for name in own_args},
                **effects.args,
            },
            maps={"usage": usage, **{name: {} for name in maps}, **effects.maps},
        )

    async def publish(self, event: Event) -> None:
        """Log an event of the service's own (a reloaded rubric set, a judge's accuracy)."""
        await self.redis.xadd(self.keys.events, wire.entry(event), maxlen=self.keeping.maxlen, approximate=True)

    def log_replayed(self, request: M) -> None:
        a = self.answers
        run_id, id_ = cast(Addressed, request).run_id, getattr(request, a.id_field)
        log.info("%s %s/%s was already %s; replied with its first %s", a.what, run_id, id_, a.done, a.answer)


def rejected(answer: type[A], id_field: str, stamped: str, **fields: Any) -> Callable[[Sender, str, Any], A]:
    """The rejected-answer factory of a service: an `answer` with the sender's ids (`id_field` its own), status
    rejected, the reason, `stamped` the time, and `fields`."""

    def make(sender: Sender, reason: str, request: Any = None) -> A:
        ids = {"run_id": sender.run_id, id_field: sender.id, "step": sender.step}
        return answer(**ids, status=JudgeStatus.REJECTED, error=reason, **{stamped: time.time()}, **fields)

    return make
