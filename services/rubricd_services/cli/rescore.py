"""`rubricd rescore RUN --version N` and `rubricd rescore diff RUN RESCORE`: a past run re-scored under another rubric
version, and what changed.

`rescore` reads RUN's kept rollouts (the scorers keep each run's last
RUBRICD_KEPT_MAXLEN scored rollouts with their first Score for
RUBRICD_KEPT_TTL_S, <ns>:recorded:<run>), optionally only steps a-b, and
publishes them again under a rescore run id (default `<RUN>.rescore-v<N>`)
whose rubric set is RUN's version N: the global set, or in per-instance mode
each instance's version N (an instance without one is not rescored, and said
so). The running scorers judge them like any rollout, so there is no second
scoring path; they go in as evaluation rollouts, which are kept out of the
memory loop: a re-scored run never summarizes, updates rubrics or closes a step. Each
keeps its rollout id and reward policy. A re-scored run published again is answered
with its first Scores (nothing is judged twice). Another judge model: rescore
into a deployment (namespace) whose scorers use it.

`rescore diff RUN RESCORE` reads both runs' kept rollouts and prints, per
rollout and per step, the reward before and after (`--json`: one object per
rollout, then one per step).
"""

import argparse
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from statistics import fmean
from typing import Any, cast

import msgspec
from redis.asyncio import Redis

from rubricd import RubricdClient, wire
from rubricd.keys import Keys
from rubricd.messages import RubricSet, RunId, Score, ScoredRollout, instance_key
from rubricd.wire import StreamEntry
from rubricd_services.state.rubric_sets import RubricStore

from .context import Context, Failed, table

PAGE = 500  # kept entries read, and rollouts published, at a time


SUMMARY = "re-score a run's kept rollouts under another rubric version; `rescore diff` compares"
HELP = __doc__


def arguments(p: argparse.ArgumentParser) -> None:
    p.usage = (
        "rubricd rescore RUN --version N [--steps A-B] [--as RESCORE]\n       rubricd rescore diff RUN RESCORE [--json]"
    )
    p.add_argument("names", nargs="+", metavar="RUN", help="RUN to re-score, or `diff RUN RESCORE`")
    p.add_argument("--version", type=int, help="the rubric version of RUN to score with")
    p.add_argument("--steps", metavar="A-B", help="only these steps (e.g. 3-7, or 5)")
    p.add_argument("--as", dest="rescore_id", metavar="RESCORE", help="the re-scored run's id (default RUN.rescore-vN)")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the scores (default 600)")
    p.add_argument("--json", action="store_true", help="diff: one JSON object per rollout, then per step")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    match args.names:
        case ["diff", run_id, rescore_id]:
            return await run_diff(run_id, rescore_id, args.json, ctx)
        case [run_id] if args.version is not None:
            return await run_rescore(run_id, args, ctx)
    raise Failed("expected: rescore RUN --version N [--steps A-B], or: rescore diff RUN RESCORE")


def steps_range(text: str | None) -> tuple[int, int] | None:
    """`3-7` or `5` as (first, last); None for all."""
    if text is None:
        return None
    found = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
    if not found:
        raise Failed(f"--steps {text!r}: expected A-B or N")
    first, last = int(found[1]), int(found[2] or found[1])
    if last < first:
        raise Failed(f"--steps {text!r}: {last} is before {first}")
    return first, last


async def kept(redis: Redis, keys: Keys, run_id: str) -> AsyncIterator[ScoredRollout]:
    """A run's kept rollouts with their first Scores, oldest first, read a page at a time."""
    start = "-"
    while entries := cast(list[StreamEntry], await redis.xrange(keys.kept_rollouts(run_id), min=start, count=PAGE)):
        for _, fields in entries:
            yield wire.decode(wire.payload(fields), ScoredRollout)
        start = "(" + entries[-1][0].decode()


async def run_rescore(run_id: str, args: argparse.Namespace, ctx: Context) -> int:
    wanted = steps_range(args.steps)
    rescore_id = _run_id(args.rescore_id or f"{run_id}.rescore-v{args.version}")
    async with ctx.redis() as redis:
        store = RubricStore(redis, ctx.keys)
        originals = [
            s async for s in kept(redis, ctx.keys, run_id) if wanted is None or wanted[0] <= s.rollout.step <= wanted[1]
        ]
        if not originals:
            raise Failed(f"run {run_id!r} has no kept rollout" + (f" in steps {args.steps}" if wanted else ""))
        per_instance = any(s.score.instance_key is not None for s in originals)
        sets: dict[str | None, RubricSet | None] = {}
        for s in originals:
            key = instance_key(s.rollout) if per_instance else None
            if key not in sets:
                sets[key] = await store.version(run_id, key, args.version)
        missing = sorted(str(k) for k, found in sets.items() if found is None)
        if len(missing) == len(sets):
            raise Failed(f"run {run_id!r} has no rubric version {args.version}")
        for key, found in sets.items():
            if found is not None:
                await store.seed(RubricSet(run_id=rescore_id, instance_key=key, version=1, rubrics=found.rubrics))
        rescored = [
            msgspec.structs.replace(
                s.rollout,
                run_id=rescore_id,
                reply_to=None,
                published_at=None,
                evaluation=True,
                reward_policy=s.score.policy,
            )
            for s in originals
            if sets[instance_key(s.rollout) if per_instance else None] is not None
        ]
        async with RubricdClient(ctx.settings.redis_url, namespace=ctx.keys.namespace) as client:
            for at in range(0, len(rescored), PAGE):
                await client.score(rescored[at : at + PAGE], timeout=args.timeout)
        after = {s.rollout.rollout_id: s.score async for s in kept(redis, ctx.keys, rescore_id)}
    print(
        f"re-scored {len(rescored)} rollouts of {run_id} under its rubric version {args.version} as {rescore_id}"
        + (f" (steps {wanted[0]}-{wanted[1]})" if wanted else "")
    )
    if missing:
        print(f"not re-scored: instances without version {args.version}: {', '.join(missing)}")
    print(render(diff({s.rollout.rollout_id: s.score for s in originals}, after)))
    return 0


async def run_diff(run_id: str, rescore_id: str, as_json: bool, ctx: Context) -> int:
    async with ctx.redis() as redis:
        before = {s.rollout.rollout_id: s.score async for s in kept(redis, ctx.keys, run_id)}
        after = {s.rollout.rollout_id: s.score async for s in kept(redis, ctx.keys, rescore_id)}
    if not after:
        raise Failed(f"run {rescore_id!r} has no kept rollout")
    changes = diff(before, after)
    if as_json:
        for row in [*changes.rollouts, *changes.steps]:
            print(msgspec.json.encode(row).decode())
    else:
        print(render(changes))
    return 0


class RolloutChange(msgspec.Struct, frozen=True):
    rollout_id: str
    step: int
    before: float | None  # the reward in the run (None: not ok, or masked)
    after: float | None  # and in the re-scored run
    before_version: int
    after_status: str


class StepChange(msgspec.Struct, frozen=True):
    step: int
    rollouts: int
    changed: int
    mean_before: float | None
    mean_after: float | None


@dataclass(frozen=True)
class Diff:
    rollouts: list[RolloutChange]
    steps: list[StepChange]


def diff(before: dict[str, Score], after: dict[str, Score]) -> Diff:
    """The rollouts of `after` (a re-scored run) beside their scores in `before` (the run), and the per-step means."""
    rows = [
        RolloutChange(r, s.step, before[r].reward, s.reward, before[r].rubric_version, str(s.status))
        for r, s in after.items()
        if r in before
    ]
    rows.sort(key=lambda c: (c.step, c.rollout_id))
    steps = []
    for step in sorted({c.step for c in rows}):
        mine = [c for c in rows if c.step == step]
        steps.append(
            StepChange(
                step,
                len(mine),
                sum(c.before != c.after for c in mine),
                _mean(c.before for c in mine),
                _mean(c.after for c in mine),
            )
        )
    return Diff(rows, steps)


def render(changes: Diff) -> str:
    moved = [c for c in changes.rollouts if c.before != c.after]
    lines = [
        table(
            [[s.step, s.rollouts, s.changed, _num(s.mean_before), _num(s.mean_after)] for s in changes.steps],
            ["step", "rollouts", "changed", "mean before", "mean after"],
        )
    ]
    if moved:
        lines.append("")
        lines.append(
            table(
                [[c.step, c.rollout_id, _num(c.before), _num(c.after), f"v{c.before_version}"] for c in moved],
                ["step", "rollout", "before", "after", "scored with"],
            )
        )
    return "\n".join(lines)


def _mean(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _run_id(run_id: str) -> str:
    try:
        return msgspec.convert(run_id, RunId)
    except msgspec.ValidationError:
        raise Failed(f"{run_id!r} is not a run id (A-Z a-z 0-9 _ . -, up to 128)") from None
