"""Rejections on the raw wire: an entry with a valid reply stream is answered at once, whatever its ids hold.

A trainer in another language may publish an id outside its alphabet; it
gets a `rejected` answer that echoes its ids (cut to MAX_ECHOED_ID_CHARS) and
names the field, instead of waiting out its own timeout, and the entry is
dead-lettered.
"""

from typing import Any

import msgspec
import pytest

from rubricd import wire
from rubricd.keys import ARM, COMPARERS, SCORERS
from rubricd.messages import ArmRollout, Comparison, DeadLetter, Rollout
from rubricd_services.runtime.intake import MAX_ECHOED_ID_CHARS
from tests.factories import arm_rollout, rollout

pytestmark = pytest.mark.integration

ONE_MB = 2**20
BAD_IDS = {"empty": "", "space": "run 1", "1 MB": "x" * ONE_MB, "NUL": "run\x001"}


def raw(message: Rollout | Comparison | ArmRollout, reply_to: str, **fields: str) -> dict[str, bytes]:
    """An entry as a trainer in any language could write it: the message's JSON with FIELDS as given."""
    body = {**msgspec.to_builtins(message), "reply_to": reply_to, **fields}
    return {wire.FIELD: msgspec.json.encode(body)}


def valid(rollout_id: str = "r0") -> Rollout:
    """A valid rollout of step 3, which an entry sends with one field made bad."""
    return rollout(rollout_id=rollout_id, step=3, prompt="1 + 1?", response="2")


def echoed(value: str) -> str:
    return value[:MAX_ECHOED_ID_CHARS]


async def replies(redis, reply_to: str, count: int, eventually) -> list[dict[str, Any]]:
    """The first COUNT answers on REPLY_TO, read as plain JSON (an echoed id need not fit the Score schema)."""

    async def arrived() -> list[dict[str, Any]]:
        entries = await redis.xrange(reply_to)
        return [msgspec.json.decode(wire.payload(f)) for _, f in entries] if len(entries) >= count else []

    return await eventually(arrived, f"{count} answers on {reply_to}")


async def letters(redis, keys, count: int, eventually) -> list[DeadLetter]:
    async def lettered() -> list[DeadLetter]:
        entries = await redis.xrange(keys.dead_letters)
        return [wire.decode(wire.payload(f), DeadLetter) for _, f in entries] if len(entries) >= count else []

    return await eventually(lettered, f"{count} dead letters")


async def test_a_rollout_with_an_id_outside_its_alphabet_is_answered_rejected_at_once(
    stack, redis, keys, start_service, eventually
):
    start_service(
        "scorer", max_rollout_bytes=4 * ONE_MB
    )  # the 1 MB id is refused for its alphabet, not the entry's size
    reply_to = keys.replies("raw-trainer")
    sent: dict[tuple[str, str], str] = {}  # (run_id, rollout_id) echoed -> the field at fault
    for n, bad in enumerate(BAD_IDS.values()):
        await redis.xadd(keys.rollouts, raw(valid(f"bad-run-{n}"), reply_to, run_id=bad))
        sent[echoed(bad), f"bad-run-{n}"] = "run_id"
        await redis.xadd(keys.rollouts, raw(valid(), reply_to, rollout_id=bad, run_id=f"run{n}"))
        sent[f"run{n}", echoed(bad)] = "rollout_id"

    answers = await replies(redis, reply_to, len(sent), eventually)
    assert sorted((a["run_id"], a["rollout_id"]) for a in answers) == sorted(sent)
    for a in answers:
        field = sent[a["run_id"], a["rollout_id"]]
        assert (a["type"], a["status"], a["reward"], a["step"]) == ("score", "rejected", None, 3)
        assert a["error"].startswith("malformed rollout") and f"`$.{field}`" in a["error"], a["error"]
    # Each entry is dead-lettered once, with the reason its sender was given, and nothing stays pending.
    dead = await letters(redis, keys, len(sent), eventually)
    assert len(dead) == len(sent) and all(d.stream == keys.rollouts and d.group == SCORERS for d in dead)
    assert sorted(d.reason for d in dead) == sorted(a["error"] for a in answers)
    assert (await redis.xpending(keys.rollouts, SCORERS))["pending"] == 0


async def test_a_rollout_over_the_size_limit_is_answered_with_its_ids_cut(
    stack, redis, keys, start_service, eventually
):
    start_service("scorer")  # max_rollout_bytes 1,000,000: a 1 MB id makes the entry too big
    reply_to = keys.replies("raw-trainer")
    await redis.xadd(keys.rollouts, raw(valid(), reply_to, rollout_id=BAD_IDS["1 MB"]))
    [answer] = await replies(redis, reply_to, 1, eventually)
    assert (answer["status"], answer["run_id"], answer["rollout_id"]) == ("rejected", "run", echoed(BAD_IDS["1 MB"]))
    assert "max_rollout_bytes" in answer["error"]
    [dead] = await letters(redis, keys, 1, eventually)
    assert dead.reason == answer["error"]


async def test_a_comparison_with_an_id_outside_its_alphabet_is_answered_rejected_at_once(
    stack, redis, keys, start_service, eventually
):
    start_service("comparer")
    reply_to = keys.replies("raw-publisher")
    pair = Comparison(run_id="pairs", comparison_id="c0", step=1, prompt="1 + 1?", response_a="2", response_b="3")
    await redis.xadd(keys.comparisons, raw(pair, reply_to, comparison_id="c 0"))
    await redis.xadd(keys.comparisons, raw(pair, reply_to, run_id=""))
    answers = await replies(redis, reply_to, 2, eventually)
    assert sorted((a["run_id"], a["comparison_id"]) for a in answers) == [("", "c0"), ("pairs", "c 0")]
    assert all(a["type"] == "preference" and a["status"] == "rejected" for a in answers)
    for a in answers:
        field = "run_id" if a["run_id"] == "" else "comparison_id"
        assert a["error"].startswith("malformed comparison") and f"`$.{field}`" in a["error"], a["error"]
    dead = await letters(redis, keys, 2, eventually)
    assert all(d.stream == keys.comparisons and d.group == COMPARERS for d in dead)
    assert (await redis.xpending(keys.comparisons, COMPARERS))["pending"] == 0


async def test_an_arm_rollout_with_an_id_outside_its_alphabet_or_no_target_is_answered_rejected_at_once(
    stack, redis, keys, start_service, eventually
):
    start_service("arm")
    reply_to = keys.replies("raw-trainer")
    sent = arm_rollout(rollout_id="g0")
    await redis.xadd(keys.arm, raw(sent, reply_to, rollout_id="g 0"))
    await redis.xadd(keys.arm, raw(sent, reply_to, run_id="run\x001"))
    await redis.xadd(keys.arm, raw(sent, reply_to, rollout_id="j0", phase="judge"))  # a judge rollout names its pair
    answers = await replies(redis, reply_to, 3, eventually)
    assert sorted((a["run_id"], a["rollout_id"]) for a in answers) == [
        ("arm", "g 0"),
        ("arm", "j0"),
        ("run\x001", "g0"),
    ]
    assert all(a["type"] == "arm_reward" and a["status"] == "rejected" and a["reward"] is None for a in answers)
    assert all(a["error"].startswith("malformed arm rollout") for a in answers), answers
    assert "comparison_id and the generator_model" in next(a["error"] for a in answers if a["rollout_id"] == "j0")
    dead = await letters(redis, keys, 3, eventually)
    assert all(d.stream == keys.arm and d.group == ARM for d in dead)
    assert (await redis.xpending(keys.arm, ARM))["pending"] == 0
