"""Lua scripts with named keys and arguments: how a handler commits its effects and acks its entry atomically.

Redis addresses a script's keys and arguments by position (`KEYS[5]`, `ARGV[13]`); a `Script` names them once,
and its generated prologue binds each to a local (`k_score`, `a_ttl`) and defines the pieces every commit
shares (append, reply, hincrby, ack), checking the reply key before the first write. An optional key given as
'' is left out of KEYS (Redis's ACLs check every key a script is given, and no key pattern admits ''), and
bound to '' all the same.
How to write one, and the argument layout: docs/development.md, "Commit scripts".
"""

import re
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from rubricd_services.runtime.intake import Rejected

Value = bytes | str | int | float
Names = str | Sequence[str]  # "score reply usage", as namedtuple takes them, or ("score", "reply", "usage")

_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")

_LIBRARY = """\
local function append(stream, maxlen, data)
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', '__data__', data)
end
local function reply(stream, maxlen, data, ttl)
  if stream ~= '' then
    append(stream, maxlen, data)
    redis.call('EXPIRE', stream, ttl)
  end
end
local function hincrby(key, map)
  for i = 1, #map, 2 do redis.call('HINCRBY', key, map[i], map[i + 1]) end
end
local function hincrbyfloat(key, map)
  for i = 1, #map, 2 do redis.call('HINCRBYFLOAT', key, map[i], map[i + 1]) end
end
local function ack(stream, consumer_group, entry_id)
  redis.call('XACK', stream, consumer_group, entry_id)
end
"""

# KEYS holds the keys given (not ''), in the order declared; ARGV[1] marks which they are ('1' given, '0' not).
_KEYS = """\
local given, at = ARGV[1], 0
local function key(i)
  if string.sub(given, i, i) ~= '1' then return '' end
  at = at + 1
  return KEYS[at]
end
"""

# The values after ARGV[tail_at] (their count), and `tail_at` moved past them.
_TAIL = """\
local function tail()
  local n, values = tonumber(ARGV[tail_at]), {}
  for i = tail_at + 1, tail_at + n do values[#values + 1] = ARGV[i] end
  tail_at = tail_at + n + 1
  return values
end
"""

_REPLY_CHECK = """\
if k_{name} ~= '' then
  local held = redis.call('TYPE', k_{name})['ok']
  if held ~= 'none' and held ~= 'stream' then
    return redis.error_reply('BADREPLY reply_to ' .. k_{name} .. ' holds a ' .. held .. ', not a stream')
  end
end
"""


def split(names: Names) -> tuple[str, ...]:
    """Names as a tuple: "score reply" -> ("score", "reply")."""
    return tuple(names.split()) if isinstance(names, str) else tuple(names)


class Script:
    """A Lua script whose KEYS and ARGV are named: its prologue binds them to `k_<name>`, `a_<name>`, `m_<name>`
    (a map's field, value pairs) and `l_<name>` (a list)."""

    def __init__(
        self,
        body: str,
        *,
        keys: Names = (),
        args: Names = (),
        maps: Names = (),
        lists: Names = (),
        reply: str | None = None,
    ) -> None:
        self.keys, self.args, self.maps, self.lists = (split(n) for n in (keys, args, maps, lists))
        for kind, names in (("key", self.keys), ("argument", self.args), ("map or list", self.maps + self.lists)):
            if bad := [n for n in names if not _NAME.match(n)]:
                raise ValueError(f"{kind} names must be Lua-safe lowercase identifiers: {bad}")
            if len(set(names)) != len(names):
                raise ValueError(f"{kind} names repeat: {list(names)}")
        if reply is not None and reply not in self.keys:
            raise ValueError(f"reply key {reply!r} is not among the keys {list(self.keys)}")
        self.reply = reply
        self.lua = self.prologue() + body.strip("\n") + "\n"

    def prologue(self) -> str:
        """The Lua that binds every name to its KEYS or ARGV position, checks the reply key, and defines the
        shared pieces."""
        lines = [_KEYS.rstrip("\n")] if self.keys else []
        lines += [f"local k_{n} = key({i})" for i, n in enumerate(self.keys, 1)]
        first = 2 if self.keys else 1  # after the given-keys mark
        lines += [f"local a_{n} = ARGV[{i}]" for i, n in enumerate(self.args, first)]
        tails = [(n, f"m_{n}") for n in self.maps] + [(n, f"l_{n}") for n in self.lists]
        if tails:
            lines.append(f"local tail_at = {first + len(self.args)}")
            lines.append(_TAIL.rstrip("\n"))
            lines += [f"local {local} = tail()" for _, local in tails]
        text = "\n".join(lines) + "\n" + _LIBRARY
        if self.reply is not None:
            text += _REPLY_CHECK.format(name=self.reply)
        return text

    def positions(
        self,
        keys: Mapping[str, str],
        args: Mapping[str, Value],
        maps: Mapping[str, Mapping[str, Value]] | None = None,
        lists: Mapping[str, Sequence[Value]] | None = None,
    ) -> tuple[list[str], list[Value]]:
        """KEYS and ARGV for these named values; every name given, and no other (a key absent as '')."""
        maps, lists = maps or {}, lists or {}
        for kind, declared, given in (
            ("keys", self.keys, keys),
            ("args", self.args, args),
            ("maps", self.maps, maps),
            ("lists", self.lists, lists),
        ):
            if set(given) != set(declared):
                raise ValueError(
                    f"{kind}: missing {sorted(set(declared) - set(given))}, unknown {sorted(set(given) - set(declared))}"
                )
        mark: list[Value] = ["".join("1" if keys[n] else "0" for n in self.keys)] if self.keys else []
        argv: list[Value] = mark + [args[n] for n in self.args]
        for name in self.maps:
            argv.append(2 * len(maps[name]))
            argv += [x for field, value in maps[name].items() for x in (field, value)]
        for name in self.lists:
            argv.append(len(lists[name]))
            argv += lists[name]
        return [keys[n] for n in self.keys if keys[n]], argv

    def register(self, redis: Redis) -> "Registered":
        return Registered(self, redis)


class Registered:
    """A Script registered on a client (redis-py's register_script: EVALSHA, falling back to loading it)."""

    def __init__(self, script: Script, redis: Redis) -> None:
        self.script = script
        self._run = redis.register_script(script.lua)

    async def __call__(
        self,
        *,
        keys: Mapping[str, str],
        args: Mapping[str, Value],
        maps: Mapping[str, Mapping[str, Value]] | None = None,
        lists: Mapping[str, Sequence[Value]] | None = None,
    ) -> Any:
        """Run the script; raises Rejected, the script having written nothing, if its reply key is not a stream."""
        key_list, argv = self.script.positions(keys, args, maps, lists)
        try:
            return await self._run(keys=key_list, args=argv)
        except ResponseError as e:
            if str(e).startswith("BADREPLY"):
                raise Rejected(str(e).removeprefix("BADREPLY ")) from None
            raise
