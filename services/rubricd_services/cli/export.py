"""`rubricd export RUN`: JSON Lines for alternating judge/generator training (Rubric-ARM), streamed."""

import argparse
import contextlib
import sys
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from typing import IO, Any, cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import GLOBAL, Keys
from rubricd.messages import JudgedComparison, RewardedArmRollout, RubricSet
from rubricd.wire import StreamEntry
from rubricd_services.state.accuracy import COUNTS, Accuracy
from rubricd_services.state.rubric_sets import RubricStore

from .context import Context

HELP = """\
Writes one JSON object a line (docs/researchers/rubric-arm.md):

- judge records ("record": "judge"), one per comparison judged in the run,
  oldest first: the prompt, the rubric set the judge used (version and
  rubrics), the pair, the label -> the judge's output (winner, consistency,
  per-rubric verdicts of each order, gatekeeper, justification), whether it
  was correct, and format compliance (every order's answer was schema-valid);
- generator records ("record": "generator"), one per generated rubric set of
  the run (a set that records `generated_by`): the instance key and prompt ->
  the set, with the judge's accuracy on the comparisons judged under that set
  as the generator's reward (null without a labelled one);
- arm records ("record": "arm"), one per Rubric-ARM rollout the arm service
  rewarded, oldest first: the phase, the completion and what it answered
  (prompt id, or comparison and order) -> the reward, why a penalty, the
  candidate's rubrics and each comparison's outcome (generator), the
  verdict's winner and the label (judge), and both models' versions
  (judge_model, generator_model).

The judge records come from the run's kept comparisons (<ns>:preferences:<run>,
the last RUBRICD_KEPT_MAXLEN of them, for RUBRICD_KEPT_TTL_S after the last;
the arm records from its kept arm rollouts, <ns>:arm-rewarded:<run>), read --page entries at a time, so a run of any size is
exported in bounded memory.
"""

PAGE = 500
SETS_KEPT = 256  # rubric sets looked up by the judge records, kept for the next ones


SUMMARY = (
    "JSON Lines of a run's judge records (comparison -> preference) and generator records (prompt -> "
    "generated rubric set, with the judge accuracy it led to)"
)


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--only", choices=("judge", "generator", "arm"), help="only these records")
    p.add_argument("--page", type=int, default=PAGE, help=f"entries read at a time (default {PAGE})")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    with _output(args.output) as out:
        async with ctx.redis() as redis:
            if args.only in (None, "judge"):
                async for record in judge_records(redis, ctx.keys, args.run_id, page=max(1, args.page)):
                    out.write(msgspec.json.encode(record) + b"\n")
            if args.only in (None, "generator"):
                async for record in generator_records(redis, ctx.keys, args.run_id):
                    out.write(msgspec.json.encode(record) + b"\n")
            if args.only in (None, "arm"):
                async for record in arm_records(redis, ctx.keys, args.run_id, page=max(1, args.page)):
                    out.write(msgspec.json.encode(record) + b"\n")
    return 0


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[IO[bytes]]:
    if path is None:
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    with open(path, "wb") as f:
        yield f


async def judge_records(redis: Redis, keys: Keys, run_id: str, *, page: int = PAGE) -> AsyncIterator[dict[str, Any]]:
    """One judge record per kept comparison of the run, oldest first, read `page` entries at a time."""
    store = RubricStore(redis, keys)
    sets: OrderedDict[tuple[str | None, int], RubricSet | None] = OrderedDict()
    after = "-"
    while True:
        entries = cast(list[StreamEntry], await redis.xrange(keys.kept_comparisons(run_id), min=after, count=page))
        for _, fields in entries:
            judged = wire.decode(wire.payload(fields), JudgedComparison)
            p = judged.preference
            key = (p.instance_key, p.rubric_version)
            if key not in sets:
                sets[key] = await store.version(run_id, p.instance_key, p.rubric_version)
                if len(sets) > SETS_KEPT:
                    sets.popitem(last=False)
            yield judge_record(judged, sets[key])
        if len(entries) < page:
            return
        after = "(" + entries[-1][0].decode()


async def arm_records(redis: Redis, keys: Keys, run_id: str, *, page: int = PAGE) -> AsyncIterator[dict[str, Any]]:
    """One record per rewarded Rubric-ARM rollout of the run, oldest first, read `page` entries at a time."""
    after = "-"
    while True:
        entries = cast(list[StreamEntry], await redis.xrange(keys.kept_arm_rollouts(run_id), min=after, count=page))
        for _, fields in entries:
            kept = wire.decode(wire.payload(fields), RewardedArmRollout)
            r, reward = kept.rollout, kept.reward
            yield {
                "record": "arm",
                **{k: v for k, v in msgspec.to_builtins(reward).items() if k != "type"},
                "completion": r.completion,
                "order": r.order if r.phase == "judge" else None,
            }
        if len(entries) < page:
            return
        after = "(" + entries[-1][0].decode()


def judge_record(judged: JudgedComparison, rubric_set: RubricSet | None) -> dict[str, Any]:
    c, p = judged.comparison, judged.preference
    return {
        "record": "judge",
        "run_id": c.run_id,
        "comparison_id": c.comparison_id,
        "step": c.step,
        "instance_key": p.instance_key,
        "prompt": c.prompt,
        "reference": c.reference,
        "rubric_set": _set(rubric_set, p.rubric_version),
        "rubrics_generation": p.rubrics_generation,
        "response_a": c.response_a,
        "response_b": c.response_b,
        "label": c.label,
        "output": {
            "winner": p.winner,
            "consistent": p.consistent,
            "gatekeeper": p.gatekeeper,
            "meta_class": p.meta_class,
            "justification": p.justification,
            "results": msgspec.to_builtins(p.results),
            "orders": msgspec.to_builtins(p.orders),
        },
        "status": str(p.status),
        "correct": p.correct,
        "format_ok": p.format_ok,
        "error": p.error,
        "judged_at": p.judged_at,
    }


def _set(rubric_set: RubricSet | None, version: int) -> dict[str, Any]:
    """The rubric set as a record holds it; only its version if it is no longer stored."""
    if rubric_set is None:
        return {"version": version, "rubrics": None}
    whole: dict[str, Any] = msgspec.to_builtins(rubric_set)
    whole.pop("type", None)
    return whole


async def generator_records(redis: Redis, keys: Keys, run_id: str) -> AsyncIterator[dict[str, Any]]:
    """One generator record per generated rubric set of the run (`generated_by` set), one instance at a time."""
    prefix = keys.rubric_set(run_id).removesuffix(GLOBAL)  # every instance slot of the run's sets
    async for raw in redis.scan_iter(match=f"{prefix}*", count=200):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        slot = name.removeprefix(prefix)
        instance = None if slot == GLOBAL else slot
        fields = cast(dict[bytes, bytes], await redis.hgetall(name))
        versions = sorted(
            (wire.decode(v, RubricSet) for k, v in fields.items() if k.startswith(b"v")), key=lambda s: s.version
        )
        for rubric_set in versions:
            if getattr(rubric_set, "generated_by", None) is None:
                continue
            accuracy = await set_accuracy(redis, keys, run_id, instance, rubric_set.version)
            prompt = await redis.hget(keys.instance_prompts(run_id), instance) if instance else None
            yield {
                "record": "generator",
                "run_id": run_id,
                "instance_key": instance,
                "prompt": prompt.decode() if isinstance(prompt, bytes) else prompt,
                "rubric_set": _set(rubric_set, rubric_set.version),
                "reward": accuracy.accuracy,
                "judged": accuracy.judged,
                "labelled": accuracy.labelled,
                "correct": accuracy.correct,
                "consistency": accuracy.consistency,
            }


async def set_accuracy(redis: Redis, keys: Keys, run_id: str, instance: str | None, version: int) -> Accuracy:
    """The judge accuracy counts of one rubric set (rubricd_services.state.accuracy)."""
    names = [f"set:{instance or GLOBAL}:{version}:{count}" for count in COUNTS]
    values = await redis.hmget(keys.accuracy(run_id), names)
    accuracy = Accuracy()
    for count, value in zip(COUNTS, values):
        setattr(accuracy, count, int(value or 0))
    return accuracy
