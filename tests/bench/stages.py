"""One rollout's wall time by stage, for the bench (tests/bench/cost.py): monotonic stamps taken in the client's
process and the scorer's by wrapping their methods, so nothing in rubricd itself is timed or changed.

    python tests/bench/stages.py STAMPS.jsonl   # the scorer (its settings from the environment), stamping

A stamp is (rollout_id, name, ns): `time.monotonic_ns()` is CLOCK_MONOTONIC, one clock for every process on the
machine, so a stage may start in one process and end in the other. The stamps are meaningful one rollout in flight
(C=1): the stages of concurrent rollouts overlap.
"""

import atexit
import functools
import inspect
import json
import sys
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

# Each stage: its name, the stamp it starts at, the stamp it ends at.
STAGES = (
    ("client: encode and check", "client_start", "client_encoded"),
    ("client: XADD", "client_encoded", "client_published"),
    ("scorer: wake-up and read", "client_published", "handle_start"),
    ("scorer: decode and check", "handle_start", "taken"),
    ("scorer: rubric set", "taken", "prepared"),
    ("scorer: stored answer read (MGET)", "prepared", "answer_start"),
    ("scorer: judge call and score", "answer_start", "answered"),
    ("scorer: commit (Lua)", "commit_start", "committed"),
    # The reply is written inside the commit: the client may read it before the scorer has the commit's answer.
    ("client: reply read, from the commit's start", "commit_start", "reply_read"),
    ("client: decode", "reply_read", "reply_decoded"),
    ("client: hand back", "reply_decoded", "client_end"),
)
# The gaps no stage covers (answered -> commit_start: encoding the answer, the kept record, the event).
GAPS = (("scorer: encode answer, record, event", "answered", "commit_start"),)

current: ContextVar[str] = ContextVar("rollout", default="")  # the rollout a stamp without one is of


class Stamps:
    """Stamps kept in memory, written as JSON lines to `path` at exit (and every `flush_every`)."""

    def __init__(self, path: Path | None = None, flush_every: int = 200) -> None:
        self.path, self.flush_every = path, flush_every
        self.rows: list[tuple[str, str, int]] = []
        if path is not None:
            atexit.register(self.flush)

    def stamp(self, name: str, rollout_id: str | None = None) -> None:
        self.rows.append((rollout_id if rollout_id is not None else current.get(), name, time.monotonic_ns()))
        if self.path is not None and len(self.rows) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        assert self.path is not None
        with self.path.open("a") as out:
            out.writelines(json.dumps(row) + "\n" for row in self.rows)
        self.rows.clear()


def wrap(owner: Any, name: str, before: Callable[..., None] | None, after: Callable[..., None] | None) -> None:
    """Replace the coroutine or function `owner.name` by one that calls `before(*args)` and `after(result)`."""
    original = getattr(owner, name)
    if hasattr(original, "__wrapped__"):
        raise RuntimeError(f"{owner.__name__}.{name} is wrapped already")
    is_async = inspect.iscoroutinefunction(original)

    if is_async:

        @functools.wraps(original)
        async def async_wrapped(*args: Any, **kwargs: Any) -> Any:
            if before:
                before(*args)
            result = await original(*args, **kwargs)
            if after:
                after(result)
            return result

        setattr(owner, name, async_wrapped)
    else:

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if before:
                before(*args)
            result = original(*args, **kwargs)
            if after:
                after(result)
            return result

        setattr(owner, name, wrapped)


def instrument_scorer(stamps: Stamps) -> None:
    """Stamp the scorer's stages: its handler's start, the rollout taken, the rubric set ready, the judge's answer,
    the commit."""
    from rubricd_services.runtime.answering import Answering, Prepared
    from rubricd_services.scorer.handler import Scorer

    def taken(rollout: Any) -> None:
        current.set(rollout.rollout_id)
        stamps.stamp("taken")

    wrap(Scorer, "handle", lambda *a: stamps.stamp("handle_start", ""), None)
    wrap(Answering, "take", None, taken)
    original_prepare = Scorer.prepare

    async def prepare(self: Scorer, rollout: Any) -> Any:
        prepared = await original_prepare(self, rollout)
        stamps.stamp("prepared")

        async def answer(read: Sequence[Any]) -> Any:
            stamps.stamp("answer_start")
            answered = await prepared.answer(read)
            stamps.stamp("answered")
            return answered

        return Prepared(prepared.reads, answer)

    Scorer.prepare = prepare  # type: ignore[method-assign]
    wrap(Answering, "_run", lambda *a: stamps.stamp("commit_start"), lambda _: stamps.stamp("committed"))


def instrument_client(stamps: Stamps) -> None:
    """Stamp the client's stages (one rollout in flight): encoded, published, the reply read, decoded."""
    from rubricd import client

    class Decoder:
        def __init__(self, decoder: Any) -> None:
            self.decoder = decoder

        def decode(self, data: bytes) -> Any:
            stamps.stamp("reply_read", "")  # the reader task's context is not the rollout's
            reply = self.decoder.decode(data)
            stamps.stamp("reply_decoded", reply.rollout_id)
            return reply

    def published(_: Any) -> None:
        stamps.stamp("client_published")

    wrap(client, "checked", None, lambda _: stamps.stamp("client_encoded"))
    wrap(client.RubricdClient, "_publish", None, published)
    client._reply_decoder = Decoder(client._reply_decoder)  # type: ignore[assignment]


def by_rollout(rows: list[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """Stamps by rollout: a stamp without a rollout (taken before the rollout was known, or by the client before
    its reply) belongs to the next rollout named in the same process's rows."""
    found: dict[str, dict[str, int]] = {}
    waiting: dict[str, int] = {}
    for rollout_id, name, ns in rows:
        if not rollout_id:
            waiting[name] = ns
            continue
        found.setdefault(rollout_id, {}).update(waiting, **{name: ns})
        waiting.clear()
    return found


def main(path: str) -> None:
    stamps = Stamps(Path(path))
    instrument_scorer(stamps)
    from rubricd_services.scorer.app import main as scorer

    scorer()


if __name__ == "__main__":
    main(sys.argv[1])
