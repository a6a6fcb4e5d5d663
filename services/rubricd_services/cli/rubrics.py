"""`rubricd rubrics show | history | diff | health | promotion`: a run's rubric set, its versions, what changed
between two, each step's rubric health, and how its changes take effect with their candidates (`import` and
`report`, HealthBench's format in and out: cli.healthbench).

Versions come from the rubric store; what produced each (step, strategy, each
modification's rationale) from the RubricsUpdated announcements, or, once the
announcements stream has been trimmed, from the memory's rubric_update records. Rubric health comes from the
steps' health hashes (rubricd_services.state.health), kept as long as the scorer keeps a step's statistics.
"""

import argparse
from typing import TypedDict

import msgspec

from rubricd import wire
from rubricd.messages import Candidate, GateCheck, Interference, PromotionPlan, RubricSet
from rubricd_services.state import health, promotion
from rubricd_services.state.announcements import announcements
from rubricd_services.state.history import changes, render_change, summary
from rubricd_services.state.rubric_sets import RubricStore

from . import healthbench
from .context import Context, Failed, clock, table

SUMMARY = "a run's rubric set, its versions, and the difference between two"


def arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = _action(sub, "show", "the current set of a run (or one version)", run_show)
    show.add_argument("--version", type=int, help="this version instead of the current one")
    _action(sub, "history", "every version: step, time, size, strategy and what changed", run_history)
    diff = _action(sub, "diff", "rubrics added, removed and modified from version A to B, with why", run_diff)
    diff.add_argument("a", type=int, metavar="A")
    diff.add_argument("b", type=int, metavar="B")
    checked = _action(
        sub, "health", "each step's rubric health: met rate, spread within groups, uninformative", run_health
    )
    checked.add_argument("--step", type=int, help="this step only (default: every step still kept)")
    gated = _action(
        sub, "promotion", "set or show how the run's rubric changes take effect, and its candidates", run_promotion
    )
    mode = gated.add_mutually_exclusive_group()
    mode.add_argument("--gated", action="store_const", const="gated", dest="promotion", help="judged in shadow first")
    mode.add_argument("--immediate", action="store_const", const="immediate", dest="promotion", help="at once")
    gated.add_argument("--shadow-steps", type=int, metavar="K", help="steps a candidate is judged in shadow")
    gated.add_argument("--honest-margin", type=float, metavar="M", help="how far honest rewards may fall (0-1)")
    gated.add_argument(
        "--interference-margin",
        type=float,
        metavar="M",
        help="how far the canaries' agreement may fall with the candidate in their calls (0-1)",
    )
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
    rows = [
        [r.id, r.kind, r.rule or "-", r.scope, r.meta_class, f"{r.points:+g}", r.criterion] for r in rubric_set.rubrics
    ]
    print(table(rows, ["ID", "KIND", "RULE", "SCOPE", "META-CLASS", "POINTS", "CRITERION"]))
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
        store = RubricStore(redis, ctx.keys)
        versions = await store.history(args.run_id, args.instance_key)
        candidates = await promotion.Candidates(redis, ctx.keys).all(args.run_id, args.instance_key)
        if not versions:
            raise Failed(f"run {args.run_id!r} has no rubric set{_of(args.instance_key)}")
        updates = await announcements(
            redis, ctx.keys, ctx.settings, args.run_id, args.instance_key, [v.version for v in versions[1:]]
        )
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
    if candidates:
        print("\ncandidates (promotion gated):")
        print(_candidates(candidates))
    return 0


async def run_promotion(args: argparse.Namespace, ctx: Context) -> int:
    given = {
        "promotion": args.promotion,
        "shadow_steps": args.shadow_steps,
        "honest_margin": args.honest_margin,
        "interference_margin": args.interference_margin,
    }
    given = {k: v for k, v in given.items() if v is not None}
    async with ctx.redis() as redis:
        own = await promotion.read_plan(redis, ctx.keys, args.run_id)
        if given:
            try:
                plan = msgspec.convert({**msgspec.to_builtins(own or PromotionPlan()), **given}, PromotionPlan)
            except msgspec.ValidationError as e:
                raise Failed(f"invalid promotion: {e}") from None
            await promotion.write_plan(redis, ctx.keys, args.run_id, plan)
            print(f"run {args.run_id}: {_promotion(plan)} from its next step summary")
            return 0
        found = await promotion.Candidates(redis, ctx.keys).all(args.run_id, args.instance_key)
    if args.json:
        print("\n".join(wire.encode(c).decode() for c in found))
        return 0
    print(f"promotion: {_promotion(own) if own else 'the updater settings (RUBRICD_PROMOTION, ...)'}")
    print(_candidates(found) if found else "no candidate yet")
    return 0


def _candidates(found: list[Candidate]) -> str:
    """The candidates' table: proposed at, shadow until, on which version, the outcome and the gate's figures."""
    rows = []
    for c in found:
        d = c.decision
        outcome = "in shadow" if d is None else d.outcome + (f" as v{d.version}" if d.version else "")
        figures = "" if d is None else "; ".join(_figures(check) for check in d.checks)
        reason = "" if d is None else d.reason
        canaries = "" if d is None or d.canaries is None else _canaries(d.canaries)
        cell = "; ".join(filter(None, [reason, figures, canaries]))
        rows.append([c.step, c.until, f"v{c.base_version}", outcome, cell])
    return table(rows, ["PROPOSED", "UNTIL", "ON", "OUTCOME", "GATE"])


def _promotion(plan: PromotionPlan) -> str:
    if plan.promotion == "immediate":
        return "immediate"
    return (
        f"gated: {plan.shadow_steps} shadow steps, honest margin {plan.honest_margin:g}, "
        f"interference margin {plan.interference_margin:g}"
    )


def _canaries(found: Interference) -> str:
    """The interference check, in a cell."""
    verdict = "pass" if found.passed else "FAIL"
    return (
        f"canaries {found.verdicts} verdicts agree {found.agreement:.3f}, {found.with_candidate:.3f} with it {verdict}"
    )


def _figures(check: GateCheck) -> str:
    """One modification's gate figures, in a cell."""
    deltas = [
        f"flagged {check.flagged} {check.flagged_delta:+.3f}" if check.flagged_delta is not None else "",
        f"honest {check.honest} {check.honest_delta:+.3f}" if check.honest_delta is not None else "",
        f"spread {check.groups_with_spread}/{check.groups}" if check.groups else "",
    ]
    verdict = "pass" if check.passed else "FAIL: " + ", ".join(check.reasons)
    return f"{check.action} {check.rubric_id} ({', '.join(filter(None, deltas))}) {verdict}"


async def run_diff(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        store = RubricStore(redis, ctx.keys)
        a, b = (
            await get(store, args.run_id, args.instance_key, args.a),
            await get(store, args.run_id, args.instance_key, args.b),
        )
        between = range(min(a.version, b.version) + 1, max(a.version, b.version) + 1)
        updates = await announcements(redis, ctx.keys, ctx.settings, args.run_id, args.instance_key, list(between))
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


async def run_health(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        steps = (
            [args.step]
            if args.step is not None
            else await health.steps(redis, ctx.keys, args.run_id, args.instance_key)
        )
        found = {s: await health.read(redis, ctx.keys, args.run_id, s, args.instance_key) for s in steps}
    found = {s: h for s, h in found.items() if h}
    if not found:
        where = f" step {args.step}" if args.step is not None else ""
        raise Failed(f"run {args.run_id!r}{_of(args.instance_key)}{where} has no rubric health (no ok score kept)")
    if args.json:
        print(
            "\n".join(
                msgspec.json.encode({"step": s, **msgspec.to_builtins(h)}).decode()
                for s, hs in found.items()
                for h in hs
            )
        )
        return 0
    for s, hs in found.items():
        uninformative = sum(h.uninformative for h in hs)
        print(f"step {s}: {len(hs)} rubrics, {uninformative} uninformative")
        rows = [
            [
                h.rubric_id,
                f"{h.met_rate:.2f}",
                h.rollouts,
                f"{h.groups_with_spread}/{h.groups}",
                "yes" if h.uninformative else "-",
                f"{h.votes_split}/{h.voted}" if h.voted else "-",
            ]
            for h in hs
        ]
        print(table(rows, ["RUBRIC", "MET", "ROLLOUTS", "SPREAD", "UNINFORMATIVE", "VOTES SPLIT"]) + "\n")
    return 0


async def get(store: RubricStore, run_id: str, instance: str | None, version: int | None) -> RubricSet:
    found = await (store.current(run_id, instance) if version is None else store.version(run_id, instance, version))
    if found is None:
        raise Failed(
            f"run {run_id!r} has no rubric set{_of(instance)}" + (f" version {version}" if version is not None else "")
        )
    return found


def _step(step: int | None) -> str:
    return "-" if step is None else str(step)


def _of(instance: str | None) -> str:
    return f" (instance {instance})" if instance else ""
