"""The trainer client against the real Redis (no scorer needed for these)."""

import asyncio
import logging
import threading
import time

import msgspec
import pytest
from redis.asyncio import Redis

from rubricd import InvalidRollout, RubricdClient, ScoreTimeout, SyncRubricdClient, wire
from rubricd.keys import Keys
from rubricd.messages import JudgeStatus, Rollout, Score, StepClosed
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rollout

pytestmark = pytest.mark.integration


def warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "rubricd.client" and r.levelno >= logging.WARNING and text in r.getMessage()
    ]


def numbered(i: int) -> Rollout:
    return rollout(rollout_id=f"r{i}", prompt="p", response="r")


async def fake_scorer(redis, keys: Keys, count: int, skip: set[str] = frozenset()) -> None:
    """Answer `count` rollouts the way the scorer's commit does (a plain XADD to reply_to)."""
    last = "0-0"
    answered = 0
    while answered < count:
        for _, entries in await redis.xread({keys.rollouts: last}, block=1000) or []:
            for entry_id, fields in entries:
                last = entry_id
                answered += 1
                r = wire.decode(wire.payload(fields), Rollout)
                if r.rollout_id in skip:
                    continue
                score = Score(
                    run_id=r.run_id,
                    rollout_id=r.rollout_id,
                    step=r.step,
                    status=JudgeStatus.OK,
                    reward=0.5,
                    rubric_version=1,
                )
                await redis.xadd(r.reply_to, wire.entry(score))


async def test_scores_come_back_in_order_and_the_reply_stream_is_cleaned_up(stack, redis):
    keys = Keys("tclient")
    client = RubricdClient(stack.redis_url, namespace=keys.namespace)
    answering = asyncio.create_task(fake_scorer(redis, keys, 5))
    scores = await client.score([numbered(i) for i in range(5)], timeout=10)
    await answering
    assert [s.rollout_id for s in scores] == [f"r{i}" for i in range(5)]
    assert await redis.xlen(client.reply_stream) == 0  # read replies are dropped
    published = await redis.xrange(keys.rollouts)
    assert all(wire.decode(f[b"__data__"], Rollout).reply_to == client.reply_stream for _, f in published)
    await redis.xadd(client.reply_stream, {"x": "1"})
    await client.close()
    assert not await redis.exists(client.reply_stream)


async def test_a_timeout_names_the_missing_rollouts(stack, redis):
    keys = Keys("tclient")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        # The answers are on the reply stream before the call: its timeout bounds nothing but the missing r1.
        for i in (0, 2):
            score = Score(run_id="run", rollout_id=f"r{i}", step=0, status="ok", reward=0.5, rubric_version=1)
            await redis.xadd(client.reply_stream, wire.entry(score))
        with pytest.raises(ScoreTimeout) as raised:
            await client.score([numbered(i) for i in range(3)], timeout=5)
    assert raised.value.missing == ["r1"]
    assert "r1" in str(raised.value)
    assert sorted(raised.value.scores) == ["r0", "r2"]  # the scores that did arrive are kept
    assert all(s.rollout_id == i and s.reward == 0.5 for i, s in raised.value.scores.items())


async def test_a_rollout_the_scorer_would_reject_is_refused_before_anything_is_published(stack, redis):
    keys = Keys("tclient")
    bad = [
        msgspec.structs.replace(numbered(1), rollout_id="r 1"),
        msgspec.structs.replace(numbered(1), run_id="run\n"),
        msgspec.structs.replace(numbered(1), step=-1),
    ]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        for one in bad:
            with pytest.raises(InvalidRollout, match="rollout_id|run_id|step"):
                await client.score([numbered(0), one], timeout=5)
    assert await redis.xlen(keys.rollouts) == 0


async def test_close_step_publishes_a_step_closed(stack, redis):
    keys = Keys("tclient")
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        await client.close_step("run", 3, rollouts=64)
        await client.close_step("run", 4, rollout_ids=["a", "b"])
    first, second = [wire.decode(f[b"__data__"], StepClosed) for _, f in await redis.xrange(keys.steps)]
    assert (first.run_id, first.step, first.rollouts) == ("run", 3, 64)
    assert (second.rollouts, second.rollout_ids) == (2, ["a", "b"])


async def test_wait_for_rubrics_returns_once_the_step_is_in_place(stack, redis):
    keys = Keys("tclient")
    store = RubricStore(redis, keys)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        waiting = asyncio.create_task(client.wait_for_rubrics("run", 2, timeout=60))
        await store.advance_step("run", 1)
        with pytest.raises(TimeoutError, match="step 2"):  # step 1 in place is not step 2
            await client.wait_for_rubrics("run", 2, timeout=0.5)
        assert not waiting.done()
        await store.advance_step("run", 2)
        await asyncio.wait_for(waiting, 30)
        with pytest.raises(TimeoutError, match="step 3"):
            await client.wait_for_rubrics("run", 3, timeout=0.5)
    assert await store.advance_step("run", 1) == 2  # never goes back


async def test_wait_for_rubrics_wakes_as_the_updater_completes_the_step(stack, redis):
    """A step completed without a new version (nothing announced) wakes its waiter through the run's step log,
    not at the waiter's next re-check."""
    keys = Keys("tclient-wake")
    store = RubricStore(redis, keys)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        client._block_ms = 600_000  # its next re-check: in ten minutes
        waiting = asyncio.create_task(client.wait_for_rubrics("run", 0, timeout=900))
        await store.advance_step("run", 0)
        await asyncio.wait_for(waiting, 60)
    [(_, fields)] = await redis.xrange(keys.rubric_step_log("run"))
    assert fields == {b"step": b"0"} and await redis.ttl(keys.rubric_step_log("run")) > 0


async def test_wait_for_rubrics_waits_for_every_step_it_closed_up_to_the_one_asked(stack, redis):
    keys = Keys("tclient-order")
    store = RubricStore(redis, keys)
    async with RubricdClient(stack.redis_url, namespace=keys.namespace) as client:
        for step in (0, 1, 2):
            await client.close_step("run", step, rollouts=1)
        await store.advance_step("run", 0)
        await store.advance_step("run", 2)  # step 2's update overtook step 1's
        with pytest.raises(TimeoutError, match=r"step 2 not in place .*\(steps 1\)"):
            await client.wait_for_rubrics("run", 2, timeout=0.5)
        await client.wait_for_rubrics("run", 0, timeout=30)  # later steps are not waited for
        waiting = asyncio.create_task(client.wait_for_rubrics("run", 2, timeout=60))
        await store.advance_step("run", 1)
        await asyncio.wait_for(waiting, 30)
        # A step seen in place is not asked for again (a long run's wait does not grow): gone from the record,
        # step 0 no longer holds up step 3.
        await redis.zrem(keys.rubric_steps("run"), "0")
        await client.close_step("run", 3, rollouts=1)
        await store.advance_step("run", 3)
        await client.wait_for_rubrics("run", 3, timeout=5)


def test_the_sync_client_serves_many_threads_at_once(stack):
    import redis as redis_sync

    keys = Keys("tsync")
    plain = redis_sync.Redis.from_url(stack.redis_url)
    plain.delete(keys.rollouts)
    stop = threading.Event()

    def answer() -> None:  # a synchronous stand-in scorer
        last = "0-0"
        while not stop.is_set():
            for _, entries in plain.xread({keys.rollouts: last}, block=200) or []:
                for entry_id, fields in entries:
                    last = entry_id
                    r = wire.decode(fields[b"__data__"], Rollout)
                    score = Score(
                        run_id=r.run_id, rollout_id=r.rollout_id, step=0, status="ok", reward=1.0, rubric_version=1
                    )
                    plain.xadd(r.reply_to, {"__data__": msgspec.json.encode(score)})

    threading.Thread(target=answer, daemon=True).start()
    results: dict[int, float] = {}
    with SyncRubricdClient(stack.redis_url, namespace=keys.namespace) as client:

        def one(i: int) -> None:
            results[i] = client.score_one(numbered(i), timeout=10).reward

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    stop.set()
    assert results == {i: 1.0 for i in range(16)}
    # closed: its reply stream is gone, and so are its event loop and thread
    assert not plain.exists(client.aio.reply_stream)
    assert client._loop.is_closed() and not client._thread.is_alive()


async def test_a_slow_redis_is_not_an_outage(stack, redis, caplog, eventually):
    """Reads that time out while Redis is up (paused here, busy or stalled in a real run) are read again quietly."""
    caplog.set_level(logging.DEBUG, logger="rubricd.client")
    keys = Keys("tslow")
    impatient = Redis.from_url(stack.redis_url, socket_timeout=0.5)  # every read gives up after 0.5 s
    batch = [numbered(i) for i in range(5)]
    async with RubricdClient(stack.redis_url, namespace=keys.namespace, redis=impatient) as client:
        scoring = asyncio.create_task(client.score(batch, timeout=60))
        await eventually(lambda: redis.xlen(keys.rollouts), "the rollouts published")
        await redis.client_pause(3000, all=True)  # Redis up, answering nobody for 3 s
        await eventually(lambda: any("Timeout reading" in r.getMessage() for r in caplog.records), "a read to time out")
        answering = asyncio.create_task(fake_scorer(redis, keys, len(batch)))
        scores = await scoring
        await asyncio.wait_for(answering, 30)
    await impatient.aclose()
    assert [s.rollout_id for s in scores] == [r.rollout_id for r in batch]
    assert warnings(caplog, "") == []  # no "unreachable", no "reachable again"


async def test_the_client_rides_out_a_redis_restart_and_closes_cleanly_without_redis(
    start_stack, fresh_ports, caplog, eventually
):
    caplog.set_level(logging.WARNING, logger="rubricd.client")
    own = start_stack(fresh_ports, "redis")  # a Redis of this test's own, to restart
    keys = Keys("trestart")
    batch = [numbered(i) for i in range(20)]
    async with RubricdClient(own.redis_url, namespace=keys.namespace) as client:
        scoring = asyncio.create_task(client.score(batch, timeout=60))
        redis = Redis.from_url(own.redis_url)
        while await redis.xlen(keys.rollouts) < len(batch):  # published; nobody answers yet
            await asyncio.sleep(0.05)
        await redis.aclose()
        own.sh("down", "redis")
        await eventually(lambda: warnings(caplog, "Redis unreachable"), "the client to find Redis unreachable")
        own.sh("up", "redis")
        redis = Redis.from_url(own.redis_url)
        # Answers every entry: the 20 kept through the restart, and the 20 the client published again.
        answering = asyncio.create_task(fake_scorer(redis, keys, 2 * len(batch)))
        scores = await scoring  # no connection error reaches the caller
        await asyncio.wait_for(answering, 30)
        published = [wire.decode(wire.payload(f), Rollout).rollout_id for _, f in await redis.xrange(keys.rollouts)]
        await redis.aclose()
        assert [s.rollout_id for s in scores] == [r.rollout_id for r in batch]
        assert all(s.status is JudgeStatus.OK for s in scores)
        assert sorted(published) == sorted([r.rollout_id for r in batch] * 2)  # what was waiting, published again
        # Each outage said once each way, however many tries it took. A Redis shutting down may take one more
        # connection before it exits, which the client rightly sees as a second, short outage.
        said = [m.split(" (")[0].split(" after")[0] for m in warnings(caplog, "Redis") if "reachable" in m]
        assert said and said == ["Redis unreachable", "Redis reachable again"] * (len(said) // 2), said
        own.sh("down", "redis")
        started = time.monotonic()
    assert time.monotonic() - started < 10  # closing without Redis neither hangs nor raises
