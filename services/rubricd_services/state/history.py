"""A run's rubric versions and what changed between them: the read side of the rubric store and the announcements.

`compare` is the one comparison of two rubric lists: `changes` explains it (`rubricd rubrics`, the dashboard),
`modifications` turns it into the updater's RubricModifications (re-announcing a version).
"""

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec
from redis.asyncio import Redis

from rubricd import wire
from rubricd.keys import Keys
from rubricd.messages import Action, Rubric, RubricModification, RubricSet, RubricsUpdated
from rubricd_services.state import runs

COMPARED = ("criterion", "points", "meta_class", "kind", "scope")


async def rubric_versions(redis: Redis, keys: Keys, run_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """The current version of each run's global set; per-instance sets counted per run (of `run_ids`, default the
    runs index's, those that have one)."""
    run_ids = await runs.listed(redis, keys) if run_ids is None else run_ids
    read = await runs.each(
        redis,
        run_ids,
        lambda pipe, run: pipe.hget(keys.rubric_set(run, None), "current"),
        lambda pipe, run: pipe.hvals(keys.rubric_instances(run)),
        lambda pipe, run: pipe.get(keys.rubric_step(run)),
    )
    rows = []
    for run_id, (raw, versions, marker) in zip(run_ids, read, strict=True):
        if not raw and not versions:
            continue
        found = msgspec.json.decode(raw, type=RubricSet) if raw else None
        rows.append(
            {
                "run_id": run_id,
                "version": found.version if found else None,
                "step": found.step if found else None,
                "rubrics": len(found.rubrics) if found else None,
                "updated_at": found.created_at if found else None,
                "instance_sets": len(versions),
                "max_instance_version": max((int(v) for v in versions), default=None),
                "rubrics_ready_for_step": int(marker) if marker is not None else None,
            }
        )
    return rows


async def announced(redis: Redis, keys: Keys, run_id: str, instance: str | None) -> dict[int, RubricsUpdated]:
    """The RubricsUpdated still on the announcements stream for the run (and instance), by version."""
    found: dict[int, RubricsUpdated] = {}
    for _, fields in cast(list[wire.StreamEntry], await redis.xrange(keys.rubrics_updated)):
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            u = wire.decode(wire.payload(fields), RubricsUpdated)
            if u.run_id == run_id and u.instance_key == instance:
                found[u.version] = u
    return found


def compare(before: Sequence[Rubric], after: Sequence[Rubric]) -> list[tuple[str, Rubric | None, Rubric | None]]:
    """Each rubric that differs from `before` to `after`, as (id, before, after): the removed ones (after None),
    then in `after`'s order the added ones (before None) and the changed ones."""
    old, new = {r.id: r for r in before}, {r.id: r for r in after}
    out: list[tuple[str, Rubric | None, Rubric | None]] = [(i, r, None) for i, r in old.items() if i not in new]
    return out + [(i, old.get(i), r) for i, r in new.items() if old.get(i) != r]


@dataclass(frozen=True)
class Change:
    """One rubric's difference between two versions; `fields` = (name, before, after) of what was modified."""

    change: str  # added | removed | modified
    rubric_id: str
    before: Rubric | None
    after: Rubric | None
    fields: list[tuple[str, object, object]]
    rationale: str


def changes(a: RubricSet, b: RubricSet, updates: list[RubricsUpdated]) -> list[Change]:
    """What turns version A into B; each change's rationale from the updates in between (latest wins), else the rubric's own."""
    why: dict[str, str] = {}
    for update in sorted(updates, key=lambda u: u.version):
        for m in update.modifications:
            rubric_id = m.rubric_id or (m.rubric.id if m.rubric else None)
            if rubric_id and m.rationale:
                why[rubric_id] = m.rationale
    out = []
    for i, old, new in compare(a.rubrics, b.rubrics):
        if new is None:
            out.append(Change("removed", i, old, None, [], why.get(i, "")))
        elif old is None:
            out.append(Change("added", i, None, new, [], why.get(i) or new.rationale))
        elif fields := [(f, getattr(old, f), getattr(new, f)) for f in COMPARED if getattr(old, f) != getattr(new, f)]:
            out.append(Change("modified", i, old, new, fields, why.get(i) or new.rationale))
    return out


def modifications(before: list[Rubric], after: list[Rubric]) -> list[RubricModification]:
    """The modifications that turn `before` into `after` (for re-announcing a version)."""
    out = []
    for i, old, new in compare(before, after):
        if new is None:
            out.append(RubricModification(action=Action.REMOVE, rubric_id=i, rationale=""))
        elif old is None:
            out.append(RubricModification(action=Action.ADD, rubric_id=i, rubric=new, rationale=new.rationale))
        else:
            only_points = msgspec.structs.replace(old, points=new.points, rationale=new.rationale) == new
            out.append(
                RubricModification(
                    action=Action.REWEIGHT if only_points else Action.MODIFY,
                    rubric_id=i,
                    rubric=None if only_points else new,
                    points=new.points if only_points else None,
                    rationale=new.rationale,
                )
            )
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
    """The change as text: a head line, then why."""
    if c.change == "modified":
        what = "; ".join(f"{f} {_value(x)} -> {_value(y)}" for f, x, y in c.fields)
        head = f"~ {c.rubric_id}: {what}"
    else:
        r = c.after or c.before
        assert r is not None
        scope = ", turn" if r.scope == "turn" else ""
        head = f"{'+' if c.change == 'added' else '-'} {c.rubric_id} ({r.kind}, {r.meta_class}, {r.points:+g}{scope}): {r.criterion}"
    return head + "\n    why: " + (c.rationale or "(no rationale recorded)")


def _value(v: object) -> str:
    line = " ".join(str(v).split())  # one line of at most 120 characters
    return f"{v:+g}" if isinstance(v, float) else repr(line if len(line) <= 120 else line[:119] + "…")
