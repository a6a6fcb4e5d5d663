"""Commit scripts with named keys and arguments (runtime.commit): names to positions, the generated prologue, and
a script run on the real Redis."""

import pytest
from redis.asyncio import Redis

from rubricd_services.runtime.commit import Script
from rubricd_services.runtime.intake import Rejected

ECHO = Script(
    keys="target reply usage",
    args="value ttl maxlen",
    maps="stats usage",
    lists="summaries",
    reply="reply",
    body="""
local stored = redis.call('GET', k_target)
if not stored then redis.call('SET', k_target, a_value, 'EX', a_ttl) end
reply(k_reply, a_maxlen, stored or a_value, a_ttl)
hincrby(k_usage, m_usage)
return {stored or false, m_stats, m_usage, l_summaries}
""",
)


def test_names_map_to_positions_in_the_order_named() -> None:
    keys, argv = ECHO.positions(
        keys={"usage": "u", "target": "t", "reply": ""},
        args={"ttl": 60, "maxlen": 100, "value": b"v"},
        maps={"usage": {"calls": 1, "tokens": 7}, "stats": {}},
        lists={"summaries": ["s1", "s2"]},
    )
    assert keys == ["t", "u"]  # the keys given; '' (the reply key here) is absent, and marked so in ARGV[1]
    # the mark, the fixed arguments, then each map and list: its count of values, the values
    assert argv == ["101", b"v", 60, 100, 0, 4, "calls", 1, "tokens", 7, 2, "s1", "s2"]


def test_names_are_given_as_a_string_or_a_sequence() -> None:
    assert (
        Script("return 1", keys=("a", "b"), args="x y").prologue()
        == Script("return 1", keys="a b", args=["x", "y"]).prologue()
    )


def test_the_prologue_binds_names_to_positions() -> None:
    lines = ECHO.lua.splitlines()
    start = lines.index("local k_target = key(1)")
    assert lines[start : start + 6] == [
        "local k_target = key(1)",
        "local k_reply = key(2)",
        "local k_usage = key(3)",
        "local a_value = ARGV[2]",
        "local a_ttl = ARGV[3]",
        "local a_maxlen = ARGV[4]",
    ]
    assert "local tail_at = 5" in lines
    assert lines.index("local m_stats = tail()") < lines.index("local m_usage = tail()")
    assert lines.index("local m_usage = tail()") < lines.index("local l_summaries = tail()")
    assert "if k_reply ~= '' then" in lines  # the reply check comes before the body
    assert lines.index("if k_reply ~= '' then") < lines.index("local stored = redis.call('GET', k_target)")
    assert ECHO.lua.endswith("return {stored or false, m_stats, m_usage, l_summaries}\n")


def test_a_script_without_tails_or_reply_has_neither() -> None:
    lua = Script("return a_x", keys="k", args="x").lua
    assert "tail_at" not in lua and "BADREPLY" not in lua
    assert "local a_x = ARGV[1]" in Script("return a_x", args="x").lua  # no keys: no mark


@pytest.mark.parametrize(
    "declared",
    [
        {"keys": "a a"},
        {"args": "x", "keys": "k", "reply": "r"},  # the reply key must be a key
        {"args": "Bad-name"},
        {"maps": "m", "lists": "m"},
    ],
)
def test_bad_declarations_are_refused(declared: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Script("return 1", **declared)


def test_every_name_must_be_given_and_no_other() -> None:
    script = Script("return 1", keys="k", args="x y")
    with pytest.raises(ValueError, match=r"args: missing \['y'\], unknown \['z'\]"):
        script.positions(keys={"k": "k"}, args={"x": 1, "z": 2})
    with pytest.raises(ValueError, match="maps"):
        script.positions(keys={"k": "k"}, args={"x": 1, "y": 2}, maps={"usage": {}})


async def test_named_keys_and_arguments_run_on_redis(redis) -> None:
    echo = ECHO.register(redis)

    async def run(reply: str, value: str) -> list:
        return await echo(
            keys={"target": "t", "reply": reply, "usage": "u"},
            args={"value": value, "ttl": 60, "maxlen": 100},
            maps={"stats": {"pass": 0.25, "fail": 1.5}, "usage": {"calls": 1, "tokens": 7}},
            lists={"summaries": ["s1", "s2", "s3"]},
        )

    stored, stats, usage, summaries = await run("", "first")
    assert stored is None and await redis.get("t") == b"first" and 0 < await redis.ttl("t") <= 60
    # the variable-length values arrive in Lua as they were given
    assert stats == [b"pass", b"0.25", b"fail", b"1.5"]
    assert usage == [b"calls", b"1", b"tokens", b"7"]
    assert summaries == [b"s1", b"s2", b"s3"]

    stored, *_ = await run("replies", "second")  # first write wins; the reply carries it
    assert stored == b"first"
    [(_, fields)] = await redis.xrange("replies")
    assert fields == {b"__data__": b"first"} and 0 < await redis.ttl("replies") <= 60
    assert await redis.hgetall("u") == {b"calls": b"2", b"tokens": b"14"}


async def test_an_absent_key_is_not_given_to_redis_so_an_acl_user_may_run_the_script(stack, redis) -> None:
    commands = ["+evalsha", "+eval", "+script|load", "+get", "+set", "+xadd", "+expire", "+hincrby", "+type"]
    await redis.acl_setuser("scoped", enabled=True, passwords=["+secret"], commands=commands, keys=["ns:*"], reset=True)
    scoped = Redis.from_url(stack.redis_url, username="scoped", password="secret")
    try:
        stored, *_ = await ECHO.register(scoped)(
            keys={"target": "ns:t", "reply": "", "usage": "ns:u"},
            args={"value": "v", "ttl": 60, "maxlen": 100},
            maps={"stats": {}, "usage": {"calls": 1}},
            lists={"summaries": []},
        )
    finally:
        await scoped.aclose()
        await redis.acl_deluser("scoped")
    assert stored is None and await redis.get("ns:t") == b"v" and await redis.hget("ns:u", "calls") == b"1"


async def test_a_reply_key_that_is_not_a_stream_is_rejected_before_any_write(redis) -> None:
    await redis.set("squatted", "a string")
    echo = ECHO.register(redis)
    with pytest.raises(Rejected, match=r"^reply_to squatted holds a string, not a stream$"):
        await echo(
            keys={"target": "t", "reply": "squatted", "usage": "u"},
            args={"value": "v", "ttl": 60, "maxlen": 100},
            maps={"stats": {}, "usage": {"calls": 1}},
            lists={"summaries": []},
        )
    assert await redis.get("squatted") == b"a string"
    assert not await redis.exists("t", "u")
