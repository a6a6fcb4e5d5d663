"""`rubricd rubrics show | history | diff`: a run's rubric set, its versions, and what changed between two
(`import` and `report`, HealthBench's format in and out: cli.healthbench).

Versions come from the rubric store; what produced each (step, strategy, each
modification's rationale) from the RubricsUpdated announcements, or, once the
announcements stream has been trimmed, from the memory's rubric_update records.
"""

import argparse
import contextlib
from dataclasses import dataclass
from typing import TypedDict, cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.messages import Rubric, RubricSet, RubricsUpdated
from rubricd.store import RubricStore

from . import healthbench
from .context import Context, Failed, StreamEntry, clip, clock, table


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("rubrics", help="a run's rubric set, its versions, and the difference between two")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = _action(sub, "show", "the current set of a run (or one version)", run_show)
    show.add_argument("--version", type=int, help="this version instead of the current one")
    _action(sub, "history", "every version: step, time, size, strategy and what changed", run_history)
    diff = _action(sub, "diff", "rubrics added, removed and modified from version A to B, with why", run_diff)
    diff.add_argument("a", type=int, metavar="A")
    diff.add_argument("b", type=int, metavar="B")
    healthbench.add(sub)


def _action(sub: argparse._SubParsersAction, name: str, help: str, fn: object) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help)
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--instance-key", help="the set of this instance key (per-instance mode)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=fn)
    return p


async def run_show(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        rubric_set = await get(RubricStore(redis, ctx.keys), args.run_id, args.instance_key, args.version)
    if args.json:
        print(wire.encode(rubric_set).decode())
        return 0
    print(
        f"run {rubric_set.run_id}  instance {rubric_set.instance_key or '(global)'}  version {rubric_set.version}  "
        f"from step {_step(rubric_set.step)}  at {clock(rubric_set.created_at)}"
    )
    if (by := rubric_set.generated_by) is not None:
        print(f"written by the rubric generator: model {by.model}, instructions sha256 {by.prompt_sha256[:12]}")
    print()
    rows = [[r.id, r.kind, r.rule or "-", r.meta_class, f"{r.points:+g}", r.criterion] for r in rubric_set.rubrics]
    print(table(rows, ["ID", "KIND", "RULE", "META-CLASS", "POINTS", "CRITERION"]))
    return 0


class HistoryRow(TypedDict):
    """One version in `rubrics history` (one JSON line with --json)."""

    version: int
    step: int | None
    at: float | None
    rubrics: int
    strategy: str | None
    changes: str


async def run_history(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        versions = await RubricStore(redis, ctx.keys).history(args.run_id, args.instance_key)
        if not versions:
            raise Failed(f"run {args.run_id!r} has no rubric set{_of(args.instance_key)}")
        updates = await announcements(redis, ctx, args.run_id, args.instance_key, [v.version for v in versions[1:]])
    rows: list[HistoryRow] = []
    for before, after in zip([None, *versions], versions):
        update = updates.get(after.version)
        changed = "seed" if before is None else summary(changes(before, after, []))
        rows.append(
            {
                "version": after.version,
                "step": after.step,
                "at": after.created_at,
                "rubrics": len(after.rubrics),
                "strategy": str(update.strategy) if update else None,
                "changes": changed,
            }
        )
    if args.json:
        print("\n".join(msgspec.json.encode(r).decode() for r in rows))
        return 0
    print(
        table(
            [
                [r["version"], _step(r["step"]), clock(r["at"]), r["rubrics"], r["strategy"] or "-", r["changes"]]
                for r in rows
            ],
            ["VERSION", "STEP", "TIME", "RUBRICS", "STRATEGY", "CHANGES"],
        )
    )
    return 0


async def run_diff(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        store = RubricStore(redis, ctx.keys)
        a, b = (
            await get(store, args.run_id, args.instance_key, args.a),
            await get(store, args.run_id, args.instance_key, args.b),
        )
        between = range(min(a.version, b.version) + 1, max(a.version, b.version) + 1)
        updates = await announcements(redis, ctx, args.run_id, args.instance_key, list(between))
    found = changes(a, b, [updates[v] for v in between if v in updates])
    if args.json:
        print("\n".join(msgspec.json.encode(c).decode() for c in found))
        return 0
    strategies = ", ".join(
        f"v{v}: {updates[v].strategy} after step {_step(updates[v].step)}" for v in between if v in updates
    )
    print(
        f"run {args.run_id}{_of(args.instance_key)}: version {a.version} -> {b.version}"
        + (f" ({strategies})" if strategies else "")
    )
    for c in found or []:
        print(render_change(c))
    if not found:
        print("no difference")
    return 0


@dataclass(frozen=True)
class Change:
    """One rubric's difference between two versions; `fields` = (name, before, after) of what was modified."""

    change: str  # added | removed | modified
    rubric_id: str
    before: Rubric | None
    after: Rubric | None
    fields: list[tuple[str, object, object]]
    rationale: str


COMPARED = ("criterion", "points", "meta_class", "kind")


def changes(a: RubricSet, b: RubricSet, updates: list[RubricsUpdated]) -> list[Change]:
    """What turns version A into B; each change's rationale from the updates in between (latest wins), else the rubric's own."""
    old, new = {r.id: r for r in a.rubrics}, {r.id: r for r in b.rubrics}
    why: dict[str, str] = {}
    for update in sorted(updates, key=lambda u: u.version):
        for m in update.modifications:
            rubric_id = m.rubric_id or (m.rubric.id if m.rubric else None)
            if rubric_id and m.rationale:
                why[rubric_id] = m.rationale
    out = [Change("removed", i, r, None, [], why.get(i, "")) for i, r in old.items() if i not in new]
    for i, r in new.items():
        if i not in old:
            out.append(Change("added", i, None, r, [], why.get(i) or r.rationale))
            continue
        fields = [(f, getattr(old[i], f), getattr(r, f)) for f in COMPARED if getattr(old[i], f) != getattr(r, f)]
        if fields:
            out.append(Change("modified", i, old[i], r, fields, why.get(i) or r.rationale))
    return out


def summary(found: list[Change]) -> str:
    """A history cell: '+no_padding ~concise(points) -old_rule'."""
    mark = {"added": "+", "removed": "-", "modified": "~"}
    return (
        " ".join(
            mark[c.change] + c.rubric_id + (f"({','.join(f for f, _, _ in c.fields)})" if c.fields else "")
            for c in found
        )
        or "no change"
    )


def render_change(c: Change) -> str:
    if c.change == "modified":
        what = "; ".join(f"{f} {_value(x)} -> {_value(y)}" for f, x, y in c.fields)
        head = f"~ {c.rubric_id}: {what}"
    else:
        r = c.after or c.before
        assert r is not None
        head = f"{'+' if c.change == 'added' else '-'} {c.rubric_id} ({r.kind}, {r.meta_class}, {r.points:+g}): {r.criterion}"
    return head + "\n    why: " + (c.rationale or "(no rationale recorded)")


async def get(store: RubricStore, run_id: str, instance: str | None, version: int | None) -> RubricSet:
    found = await (store.current(run_id, instance) if version is None else store.version(run_id, instance, version))
    if found is None:
        raise Failed(
            f"run {run_id!r} has no rubric set{_of(instance)}" + (f" version {version}" if version is not None else "")
        )
    return found


async def announcements(
    redis: Redis, ctx: Context, run_id: str, instance: str | None, wanted: list[int]
) -> dict[int, RubricsUpdated]:
    """The RubricsUpdated that produced each wanted version: from the stream, else from memory."""
    found: dict[int, RubricsUpdated] = {}
    for _, fields in cast(list[StreamEntry], await redis.xrange(ctx.keys.rubrics_updated)):
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            u = wire.decode(wire.payload(fields), RubricsUpdated)
            if u.run_id == run_id and u.instance_key == instance:
                found[u.version] = u
    if any(v not in found for v in wanted):
        for u in await remembered(ctx, run_id, instance):
            found.setdefault(u.version, u)
    return found


async def remembered(ctx: Context, run_id: str, instance: str | None) -> list[RubricsUpdated]:
    """The run's rubric_update records in memory; none if the memory cannot be reached."""
    from rubricd_services.common.memory import (
        Memory,
        MemoryKind,
    )  # Weaviate's client is slow to import: only when needed

    try:
        memory = await Memory.connect(ctx.settings, _NoEmbedder())
    except Exception:
        return []
    try:
        items = await memory.recent(run_id, MemoryKind.RUBRIC_UPDATE, limit=10_000, instance_key=instance)
    except Exception:  # the memory failed mid-read: the versions show without their rationale
        return []
    finally:
        await memory.close()
    out = []
    for item in items:
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            out.append(wire.decode(item.message, RubricsUpdated))
    return [u for u in out if u.instance_key == instance]


class _NoEmbedder:
    """Listing memory needs no vectors."""

    dimensions = None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("not used")


def _value(v: object) -> str:
    return f"{v:+g}" if isinstance(v, float) else repr(clip(str(v), 120))


def _step(step: int | None) -> str:
    return "-" if step is None else str(step)


def _of(instance: str | None) -> str:
    return f" (instance {instance})" if instance else ""
