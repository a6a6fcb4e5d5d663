"""The service template against the real Redis: every entry of an input stream is settled, whatever happens.

An entry the wire format does not describe (another field, several fields, bytes that are not UTF-8, FastStream's
own envelope) is dead-lettered at once with the reason, never left pending; a valid entry beside them is handled.
An entry no handler works on is never kept alive: one whose read reply was lost on the way is reclaimed; a handler
past its deadline is cancelled and its entry retried, then dead-lettered; a Redis outage is one line each way.
"""

import asyncio
import json
import signal
import threading
from collections.abc import Callable

import httpx
import msgspec
import pytest

from rubricd import RubricdClient, wire
from rubricd.keys import ANALYZERS, CANARIES, SCORERS, SUMMARIZERS, UPDATERS, Keys
from rubricd.messages import (
    DeadLetter,
    Event,
    EventKind,
    JudgeStatus,
    RubricsUpdated,
    Score,
    ScoredRollout,
    StepClosed,
)
from rubricd_services.runtime.service import EXIT_GROUP_GONE
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rollout

# FastStream's binary message format starts with this header; its JSON envelope is {"data": ..., "headers": ...}.
FASTSTREAM_BINARY = b"\x89BIN\x0d\x0a\x1a\x0a"


def odd_entries(valid: bytes) -> list[tuple[dict[bytes, bytes], str]]:
    """(entry fields, what its dead letter's reason says) for every shape that is not one `__data__` field."""
    return [
        ({b"data": valid}, "entry fields ['data']"),
        ({b"__data__": valid, b"extra": b"1"}, "entry fields ['__data__', 'extra']"),
        ({b"\xff\xfe": valid}, "entry fields ['\\\\xff\\\\xfe']"),
        ({b"__data__": b'{"run_id": "\xff"}'}, "malformed"),
        ({b"__data__": b"[" * 100_000}, "malformed"),
        ({b"__data__": msgspec.json.encode({"data": valid.decode(), "headers": {"correlation_id": "c"}})}, "malformed"),
        ({b"__data__": FASTSTREAM_BINARY + valid}, "malformed"),
    ]


async def letters(redis, keys: Keys, count: int, timeout: float = 60) -> list[DeadLetter]:
    deadline = asyncio.get_running_loop().time() + timeout
    while (n := await redis.xlen(keys.dead_letters)) < count and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    found = [wire.decode(wire.payload(f), DeadLetter) for _, f in await redis.xrange(keys.dead_letters)]
    assert n == count, f"{n} dead letters, expected {count}: {[(x.reason[:80], x.payload[:60]) for x in found]}"
    found = [wire.decode(wire.payload(f), DeadLetter) for _, f in await redis.xrange(keys.dead_letters)]
    return sorted(found, key=lambda letter: tuple(map(int, letter.entry_id.split("-"))))


@pytest.mark.parametrize(
    ("service", "stream", "group"),
    [("analyzer", "scored", ANALYZERS), ("summarizer", "steps", SUMMARIZERS), ("updater", "summaries", UPDATERS)],
)
async def test_entries_of_any_shape_are_dead_lettered_with_the_reason(
    stack, redis, keys, start_service, service, stream, group
):
    start_service(service, reclaim_idle_ms=500)
    name = getattr(keys, stream)
    odd = odd_entries(b'{"run_id": "r"}')
    for fields, _ in odd:
        await redis.xadd(name, fields)
    found = await letters(redis, keys, len(odd))
    for letter, (_, reason) in zip(found, odd):
        assert letter.service == service and letter.stream == name and letter.group == group
        assert reason in letter.reason, letter.reason
    # A letter is written and its entry acked in one script: nothing is left pending, so nothing can be reclaimed
    # and dead-lettered twice.
    assert (await redis.xpending(name, group))["pending"] == 0
    assert await redis.xlen(keys.dead_letters) == len(odd)


async def test_the_scorer_settles_odd_entries_and_scores_the_valid_ones_around_them(
    stack, redis, keys, start_service, eventually
):
    start_service("scorer", reclaim_idle_ms=500)
    valid = rollout(rollout_id="inner")
    odd = odd_entries(wire.encode(valid))
    for fields, _ in odd:
        await redis.xadd(keys.rollouts, fields)
    # A rollout with a top-level `data` field of its own is no envelope: it is a rollout with a field it does not
    # have, refused naming it; the rollout inside is never unwrapped and scored in its place.
    with_data = {**msgspec.to_builtins(valid), "rollout_id": "outer", "data": wire.encode(valid).decode()}
    await redis.xadd(keys.rollouts, {wire.FIELD: msgspec.json.encode(with_data)})
    found = await letters(redis, keys, len(odd) + 1)
    for letter, (_, reason) in zip(found, [*odd, (None, "unknown field `data`")]):
        assert letter.service == "scorer" and reason in letter.reason, letter.reason
    for rollout_id in ("inner", "outer"):  # neither the envelope nor what it holds was scored
        assert await redis.get(keys.score("run", rollout_id)) is None
    assert (await redis.xpending(keys.rollouts, SCORERS))["pending"] == 0  # each letter acks its entry as it lands
    assert await redis.xlen(keys.dead_letters) == len(odd) + 1


async def test_dead_letters_are_bounded(stack, redis, keys, start_service):
    start_service("scorer", max_rollout_bytes=4096, dead_letter_max_bytes=2048)
    huge = rollout(rollout_id="huge", prompt="p", response="x" * 50_000)
    await redis.xadd(keys.rollouts, wire.entry(huge))
    await redis.xadd(keys.rollouts, {b"f" * 100_000: b"1"})  # its reason would quote the whole field name
    cut, odd = await letters(redis, keys, 2)
    assert len(cut.payload) == 2048 and cut.payload_size == len(wire.encode(huge))
    assert cut.payload == wire.encode(huge)[:2048]
    assert len(odd.payload) == 2048 and odd.payload_size == len(b'{"' + b"f" * 100_000 + b'":"1"}')
    assert len(odd.reason) == 2000 and odd.reason.startswith("entry fields ['fff")


async def test_the_streams_trainers_write_are_trimmed_below_what_is_acked(
    stack, redis, keys, start_service, eventually
):
    start_service("summarizer", trim_interval_s=0.3)
    for step in range(20):
        await redis.xadd(keys.steps, wire.entry(StepClosed(run_id="run", step=step, rollouts=0)))

    async def trimmed() -> bool:
        return await redis.xlen(keys.steps) == 0

    await eventually(trimmed, "the steps stream trimmed to nothing")
    assert (await redis.xinfo_groups(keys.steps))[0]["entries-read"] == 20  # read and acked, then trimmed


async def judge_calls(stack) -> int:
    async with httpx.AsyncClient() as http:
        stats = (await http.get(f"{stack.llm_base_url.removesuffix('/v1')}/admin/stats")).json()
    return stats["schemas"].get("JudgeVerdict", 0)


async def test_a_live_consumer_keeps_a_slow_entry_and_a_dead_ones_is_taken_within_seconds(
    stack, redis, keys, start_service, drained
):
    slow = " [sim:latency_ms=3000]"  # each judge call takes 3 s: three times reclaim_idle_ms
    pair = [start_service("scorer", reclaim_idle_ms=1000) for _ in range(2)]
    before = await judge_calls(stack)
    batch = [  # contents apart: the judge cache would judge one content once
        rollout(rollout_id=f"r{i}", prompt=f"2 + 2? (asked {i})", response=f"4{slow}") for i in range(4)
    ]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score(batch, timeout=60)
    assert all(s.status is JudgeStatus.OK for s in scores)
    # Judged once each: no live consumer's entry was reclaimed. A reclaim would have come 1 s into a 3 s call, its
    # judge call well before the scores; once drained, nothing is left pending for a late reclaim to take.
    [(last, _)] = await redis.xrevrange(keys.rollouts, count=1)
    await drained(redis, keys.rollouts, SCORERS, last)
    assert await judge_calls(stack) - before == len(batch)
    for process in pair:
        process.stop()

    # With the default reclaim_idle_ms, what a killed scorer held is judged again within seconds.
    slower = " [sim:latency_ms=8000]"  # long enough to start the second scorer while the first one judges
    doomed = start_service("scorer")
    late = rollout(rollout_id="late", prompt="2 + 2?", response=f"4{slower}")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scoring = asyncio.create_task(client.score_one(late, timeout=60))
        while not (await redis.xpending(keys.rollouts, SCORERS))["pending"]:
            await asyncio.sleep(0.05)
        start_service("scorer")  # it reads new entries only: the pending one can reach it by a reclaim alone
        assert not scoring.done()
        doomed.kill()
        killed = asyncio.get_running_loop().time()
        score = await scoring
    waited = asyncio.get_running_loop().time() - killed
    assert score.status is JudgeStatus.OK
    # reclaim_idle_ms (5 s) + one 8 s judge call: seconds, not the minutes a claim's TTL or a timeout would take
    # (the bound leaves a loaded machine room)
    assert waited < 45, f"a dead consumer's rollout waited {waited:.1f} s"


class LossyProxy:
    """A TCP proxy between a service and Redis that loses one reply: once `lose(command, reply)` says so, it cuts
    that connection after Redis has run the command, and the reply never reaches the service. It runs in a thread
    of its own, so a test blocked on a service (start_service waits) does not stop it."""

    def __init__(self, redis_port: int) -> None:
        self.redis_port = redis_port
        self.lose: Callable[[bytes, bytes], bool] | None = None
        self.lost = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> "LossyProxy":
        self._thread.start()
        start = asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _close(self) -> None:
        self._server.close()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # retrieved: no "exception never retrieved" noise

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"

    async def _serve(self, service_r: asyncio.StreamReader, service_w: asyncio.StreamWriter) -> None:
        redis_r, redis_w = await asyncio.open_connection("127.0.0.1", self.redis_port)
        # What the service sent since Redis last answered on this connection: its latest command, whole (a
        # large one reaches the proxy in several reads).
        sent = b""

        async def upstream() -> None:
            nonlocal sent
            while data := await service_r.read(65536):
                sent += data
                redis_w.write(data)
                await redis_w.drain()
            redis_w.close()

        async def downstream() -> None:
            nonlocal sent
            while data := await redis_r.read(65536):
                command, sent = sent, b""
                if self.lose is not None and self.lose(command, data):
                    self.lose, self.lost = None, self.lost + 1
                    service_w.transport.abort()
                    redis_w.transport.abort()
                    return
                service_w.write(data)
                await service_w.drain()
            service_w.close()

        await asyncio.gather(upstream(), downstream(), return_exceptions=True)


async def pending_entries(redis, stream: str, group: str) -> list[dict]:
    return await redis.xpending_range(stream, group, "-", "+", 100)


async def test_an_entry_whose_read_reply_was_lost_is_reclaimed_not_kept_alive(
    stack, redis, keys, start_service, eventually
):
    """XREADGROUP ran on the server (the entry is delivered, pending to this consumer) but its reply never came
    back: no handler works on it, so the keep-alive must let it go idle for the reclaim to take."""
    with LossyProxy(stack.ports["RUBRICD_REDIS_PORT"]) as proxy:
        start_service("scorer", redis_url=proxy.url, reclaim_idle_ms=1000)
        before = await judge_calls(stack)
        proxy.lose = lambda command, reply: b"XREADGROUP" in command and b'"rollout_id":"lost"' in reply
        lost = rollout(rollout_id="lost", prompt="2 + 2?")
        async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
            scoring = asyncio.create_task(client.score_one(lost, timeout=90))
            await eventually(lambda: proxy.lost, "the proxy to lose the reply of the read that delivered the rollout")
            # Delivered (pending: to scorer-0, or already to its reclaiming consumer), and never seen by a handler.
            assert len(await pending_entries(redis, keys.rollouts, SCORERS)) == 1
            score = await scoring
    assert score.status is JudgeStatus.OK
    assert await judge_calls(stack) - before == 1  # judged by the reclaim alone: the first delivery never ran
    assert (await redis.xpending(keys.rollouts, SCORERS))["pending"] == 0


async def test_entries_read_and_waiting_for_a_free_handler_are_kept_not_reclaimed(stack, redis, keys, start_service):
    """A read takes up to max_records entries and FastStream queues them until a handler is free: queued, they
    are in hand, so the keep-alive keeps them (three of these four wait 1-3 judge calls at 2 s each, far past
    reclaim_idle_ms)."""
    start_service("scorer", max_in_flight=1, max_records=4, reclaim_idle_ms=500, judge_cache_ttl_s=0)
    before = await judge_calls(stack)
    batch = [rollout(rollout_id=f"q{i}", prompt=f"2 + 2? ({i})", response="4 [sim:latency_ms=2000]") for i in range(4)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scores = await client.score(batch, timeout=90)
    assert all(s.status is JudgeStatus.OK for s in scores)
    assert await judge_calls(stack) - before == len(batch)  # none judged twice by a reclaim
    handed_on = [
        wire.decode(wire.payload(f), ScoredRollout).score.rollout_id for _, f in await redis.xrange(keys.scored)
    ]
    assert sorted(handed_on) == [r.rollout_id for r in batch]


async def test_a_commit_whose_reply_was_lost_scores_once_and_leaves_nothing_pending(
    stack, redis, keys, start_service, eventually
):
    """The commit script ran (score stored, reply written, entry acked), then the connection broke before its
    reply: the handler fails as in an outage, and nothing is held, retried or scored twice."""
    with LossyProxy(stack.ports["RUBRICD_REDIS_PORT"]) as proxy:
        start_service("scorer", redis_url=proxy.url, reclaim_idle_ms=1000)
        warm = rollout(rollout_id="warm", prompt="1 + 1?", response="2")
        cut = rollout(rollout_id="cut", prompt="2 + 2?")
        async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
            await client.score_one(warm, timeout=60)  # loads the commit script, so the next commit is one EVALSHA
            before = await judge_calls(stack)
            proxy.lose = lambda command, reply: b"EVALSHA" in command and b'"rollout_id":"cut"' in command
            score = await client.score_one(cut, timeout=60)
            # The reply reaches the client through its own connection; the proxy's thread may see Redis's answer
            # to the EVALSHA, and cut it, a moment later.
            await eventually(lambda: proxy.lost == 1, "the proxy to cut the commit's reply")
    assert score.status is JudgeStatus.OK
    assert wire.decode(await redis.get(keys.score("run", "cut")), Score) == score
    assert (await redis.xpending(keys.rollouts, SCORERS))["pending"] == 0
    handed_on = [
        wire.decode(wire.payload(f), ScoredRollout).score.rollout_id for _, f in await redis.xrange(keys.scored)
    ]
    assert sorted(handed_on) == ["cut", "warm"]
    assert await judge_calls(stack) - before == 1


async def test_a_handler_past_its_deadline_is_cancelled_retried_and_dead_lettered_naming_it(
    stack, redis, keys, start_service, eventually
):
    # The judge's call never answers within the handler's deadline (its own timeout, 60 s, is far later).
    start_service("scorer", handler_deadline_s=1.5, reclaim_idle_ms=500, max_failures=2, judge_cache_ttl_s=0)
    hung = rollout(rollout_id="hung", prompt="2 + 2?", response="4 [sim:latency_ms=120000]")
    await redis.xadd(keys.rollouts, wire.entry(hung))
    [letter] = await letters(redis, keys, 1, timeout=90)
    assert letter.deliveries == 3  # two deliveries ran past the deadline, the third found it spent
    assert "failed 2 of 3 deliveries (max_failures=2)" in letter.reason, letter.reason
    assert "DeadlineExceeded" in letter.reason and "handler_deadline_s=1.5" in letter.reason, letter.reason
    assert (await redis.xpending(keys.rollouts, SCORERS))["pending"] == 0


async def test_a_redis_outage_is_one_line_each_way_and_no_traceback(
    keys, start_stack, fresh_ports, start_service, eventually
):
    own = start_stack(fresh_ports, "redis")
    scorer = start_service("scorer", wait=False, redis_url=own.redis_url, reclaim_idle_ms=1000)
    scorer.wait_consuming(own.redis_url, keys)
    own.sh("down", "redis")
    await eventually(lambda: "is unreachable" in scorer.log.read_text(), "the scorer to notice Redis is gone")
    await asyncio.sleep(3)  # the outage lasts: every fetch loop and chore fails again and again meanwhile
    own.sh("up", "redis")
    await eventually(lambda: "is back" in scorer.log.read_text(), "the scorer to notice Redis is back")
    async with RubricdClient(own.redis_url, namespace=keys.namespace) as client:
        score = await client.score_one(rollout(rollout_id="after", prompt="2+2?"))
    assert score.status is JudgeStatus.OK
    lines = [json.loads(line) for line in scorer.log.read_text().splitlines() if line.startswith("{")]
    outage = [x["message"] for x in lines if "is unreachable" in x["message"] or "is back" in x["message"]]
    assert len(outage) == 2 and "Redis is unreachable" in outage[0] and "Redis is back" in outage[1], outage
    assert not [x for x in lines if x["level"] in ("ERROR", "CRITICAL") or "exc_info" in x], lines


async def test_junk_on_a_listened_stream_is_one_warning_not_a_traceback(stack, redis, keys, start_service, eventually):
    scorer = start_service("scorer")

    async def listening() -> bool:  # its listener reads from the stream's end: what is written before, it never sees
        return any(c["cmd"] == "xread" and "b" in c["flags"] for c in await redis.client_list())

    await eventually(listening, "the scorer's listener to wait on the rubric updates")
    await redis.xadd(keys.rubrics_updated, {wire.FIELD: b'{"run_id": 1}'})
    await redis.xadd(keys.rubrics_updated, {b"other": b"field"})
    await eventually(lambda: scorer.log.read_text().count("skipped entry") == 2, "the scorer to skip both entries")
    lines = [json.loads(line) for line in scorer.log.read_text().splitlines() if line.startswith("{")]
    assert not [x for x in lines if x["level"] in ("ERROR", "CRITICAL") or "exc_info" in x], lines


async def test_an_update_published_while_a_listener_is_paused_is_heard(stack, redis, keys, start_service, eventually):
    """A listener reads on from where it was: an entry added while none of its reads is blocked (the process
    paused, as by a busy machine, between two of them) still arrives."""
    scorer = start_service("scorer")
    store = RubricStore(redis, keys)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        first = await client.score_one(rollout(run_id="paused", rollout_id="a", prompt="2+2?"))
        v1 = await store.current("paused")
        assert v1 is not None and first.rubric_version == v1.version == 1
        assert await store.publish(msgspec.structs.replace(v1, version=2))
        scorer.proc.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(1)  # meanwhile Redis ends the listener's blocking read (100 ms): none is waiting
            await redis.xadd(
                keys.rubrics_updated, wire.entry(RubricsUpdated(run_id="paused", version=2, previous_version=1))
            )
        finally:
            scorer.proc.send_signal(signal.SIGCONT)

        async def reloaded() -> bool:
            return any(
                e.kind == EventKind.RUBRICS_RELOADED and e.service == "scorer" and e.fields.get("version") == 2
                for e in (wire.decode(wire.payload(f), Event) for _, f in await redis.xrange(keys.events))
            )

        await eventually(reloaded, "the scorer to hear the update it was paused through")
        second = await client.score_one(rollout(run_id="paused", rollout_id="b", step=1, prompt="2+2?"))
    assert second.rubric_version == 2


async def test_handlers_cancelled_at_shutdown_are_one_line_and_their_entries_reclaimed(
    stack, redis, keys, start_service, eventually
):
    first = start_service("scorer", graceful_timeout_s=1, judge_cache_ttl_s=0)
    batch = [rollout(rollout_id=f"c{i}", prompt=f"2 + 2? ({i})", response="4 [sim:latency_ms=4000]") for i in range(8)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        scoring = asyncio.create_task(client.score(batch, timeout=90))

        async def all_taken() -> bool:
            return (await redis.xpending(keys.rollouts, SCORERS))["pending"] == len(batch)

        await eventually(all_taken, "the scorer to take all 8 rollouts")
        first.stop()  # SIGTERM mid-call: after 1 s the 8 handlers are cancelled
        start_service("scorer", reclaim_idle_ms=1000)
        scores = await scoring
    assert all(s.status is JudgeStatus.OK for s in scores)
    lines = [json.loads(line) for line in first.log.read_text().splitlines() if line.startswith("{")]
    assert [x["message"] for x in lines if "cancelled" in x["message"]] == [
        "scorer: handlers still running are cancelled; their entries wait for a reclaim"
    ]
    assert not [x for x in lines if x["level"] in ("ERROR", "CRITICAL") or "exc_info" in x], lines


async def test_a_redis_that_lost_its_data_stops_the_service_and_started_again_it_scores(
    keys, start_stack, fresh_ports, start_service, eventually
):
    """A FLUSHALL (or a Redis restarted without persistence) takes the consumer groups with it, and FastStream stops
    the app when a read finds its group gone: the service says so in one line and exits with EXIT_GROUP_GONE, so
    its orchestrator starts it again, and started again it makes its group and scores the next rollout."""
    own = start_stack(fresh_ports, "redis")
    first = start_service("scorer", wait=False, redis_url=own.redis_url, reclaim_idle_ms=1000)
    first.wait_consuming(own.redis_url, keys)
    async with RubricdClient(own.redis_url, namespace=keys.namespace) as client:
        before = await client.score_one(rollout(rollout_id="before", prompt="2+2?"))
        await client.redis.flushall()
        await eventually(lambda: first.proc.poll() is not None, "the scorer to stop")
        assert first.proc.returncode == EXIT_GROUP_GONE, first.log.read_text()[-3000:]
        start_service("scorer", wait=False, redis_url=own.redis_url).wait_consuming(own.redis_url, keys)
        after = await client.score_one(rollout(rollout_id="after", prompt="3+3?", response="6"))
    assert before.status is JudgeStatus.OK and after.status is JudgeStatus.OK
    lines = [json.loads(line) for line in first.log.read_text().splitlines() if line.startswith("{")]
    gone = [x["message"] for x in lines if "is gone" in x["message"]]
    said = "is gone: Redis lost its data (a FLUSHALL, or a restart without persistence); stopping with exit code "
    # whichever of the scorer's consumer groups a read finds gone first: its rollouts' or its canaries' steps'
    assert gone in (
        [
            f"scorer: consumer group {group} of {stream} {said}{EXIT_GROUP_GONE}, to be started again, which makes it again"
        ]
        for group, stream in ((SCORERS, keys.rollouts), (CANARIES, keys.canary_steps))
    ), gone
    assert not [x for x in lines if x["level"] in ("ERROR", "CRITICAL") or "exc_info" in x], lines


async def test_a_service_whose_redis_does_not_answer_at_start_exits_for_its_orchestrator(
    stack, start_service, free_port, eventually
):
    """Found on Kubernetes: a Service's address not yet routed at a pod's start reached an HTTP proxy. The gateway
    (whose start-up needs no Redis call) finished starting, failed after, and kept its listener up answering 500
    for its start-up probe's five minutes. Now Redis must answer before start-up ends, or the process exits."""
    http_not_redis = f"redis://127.0.0.1:{stack.simulator_port}/0"  # an HTTP server: no RESP answer
    gateway = start_service("gateway", wait=False, redis_url=http_not_redis, gateway_port=free_port)
    await eventually(lambda: gateway.proc.poll() is not None, "the gateway to exit", timeout=90)
    assert gateway.proc.returncode != 0
    log = gateway.log.read_text()
    assert "redis.exceptions" in log and "Application startup failed" in log, log[-3000:]
