"""`rubricd status`: stream lengths, consumer groups (consumers, pending, lag, oldest pending), rubric versions,
each scheduled run's active meta-class, each run's judge canaries, each Rubric-ARM run's phase, and each run's LLM
calls, tokens and cost per
agent."""

import argparse
from typing import Any

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys
from rubricd.wire import string
from rubricd_services.runtime.status import stream_status, streams
from rubricd_services.state import arm, canaries, health, runs
from rubricd_services.state.history import rubric_versions
from rubricd_services.state.schedule import Decision
from rubricd_services.state.usage import run_usage

from .context import Context, ago, share, table

HELP = """\
For each stream of the namespace: its length; for each consumer group reading it:
its consumers (pending entries, idle time), the group's pending entries (delivered,
not acked), its lag (entries not yet delivered to the group) and the age of its
oldest pending entry; the rubric version in force for each run; for each run
with a meta-class schedule (reward policy `alternating`), the active meta-class
of its latest decided step and why (`rubricd schedule RUN`: every step); for each
run with canaries, its latest canary step's agreement with the labels, its baseline
and since which step the judge drifts (`rubricd judge canaries RUN`: every step); for
each Rubric-ARM run, what its latest decided step trains (`rubricd arm phases RUN`:
every step); for each run judged by votes (RUBRICD_JUDGE_VOTES), at its latest step,
how often the votes split on each rubric (`rubricd rubrics health RUN`: every step); and
what each run's LLM calls used per agent and model: calls, verdicts reused from the judge
cache, prompt and completion tokens, and their cost at RUBRICD_PRICES (a model
without a price shows tokens only; canaries are the agent `canary`).

Lag or pending that keeps growing on the `analyzers` group (stream `scored`) means
the analyzers fall behind the scorers: add analyzer workers
(`python -m analyzer --workers N`, or more analyzer replicas). Lag on `scorers`
means the same for scorers, and it is on the trainer's path.
"""


SUMMARY = (
    "streams, consumer groups (pending, lag), rubric versions, active meta-classes, tokens and cost per run; "
    "growing lag on analyzers: add analyzer workers"
)


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="the same as one JSON object")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        run_ids = await runs.listed(redis, ctx.keys)
        report: dict[str, Any] = {
            "namespace": ctx.keys.namespace,
            "streams": [await stream_status(redis, name) for name in streams(ctx.keys)],
            "rubrics": await rubric_versions(redis, ctx.keys, run_ids),
            "schedules": await active_classes(redis, ctx.keys, run_ids),
            "canaries": await canary_runs(redis, ctx.keys, run_ids),
            "arm_phases": await arm_phases(redis, ctx.keys, run_ids),
            "usage": await run_usage(redis, ctx.keys, ctx.settings.prices, run_ids),
        }
        report["votes"] = await vote_splits(redis, ctx.keys, [r["run_id"] for r in report["rubrics"]])
    print(msgspec.json.encode(report).decode() if args.json else render(report, ctx.keys.namespace))
    return 0


async def active_classes(redis: Redis, keys: Keys, run_ids: list[str]) -> list[dict[str, Any]]:
    """Each run with a schedule (alternating rewards): its latest decided step, that step's active meta-class (None:
    the weighted total) and why, and how many steps are decided."""
    found = await runs.each(redis, run_ids, lambda pipe, run: pipe.hgetall(keys.schedule(run)))
    rows = []
    for run_id, (decisions,) in zip(run_ids, found, strict=True):
        if not decisions:
            continue
        step, raw = max(((int(s), d) for s, d in decisions.items()), key=lambda decided: decided[0])
        latest = msgspec.json.decode(raw, type=Decision)
        rows.append(
            {
                "run_id": run_id,
                "step": step,
                "meta_class": latest.meta_class,
                "reason": latest.reason,
                "strategy": latest.strategy,
                "decided_steps": len(decisions),
            }
        )
    return rows


async def vote_splits(redis: Redis, keys: Keys, run_ids: list[str]) -> list[dict[str, Any]]:
    """Each run judged by votes: at its latest step with rubric health, each rubric's voted rollouts and those
    whose votes split on it (`rubricd rubrics health RUN`: every step)."""
    latest = await health.latest_steps(redis, keys, run_ids)
    found = await runs.each(redis, list(latest), lambda pipe, run: pipe.hgetall(keys.rubric_health(run, latest[run])))
    rows = []
    for (run_id, step), (raw,) in zip(latest.items(), found, strict=True):
        rubrics = health.health({string(k): int(v) for k, v in raw.items()})
        voted = [{"rubric_id": h.rubric_id, "voted": h.voted, "split": h.votes_split} for h in rubrics if h.voted]
        if voted:
            rows.append({"run_id": run_id, "step": step, "rubrics": voted})
    return rows


async def canary_runs(redis: Redis, keys: Keys, run_ids: list[str]) -> list[dict[str, Any]]:
    """Each run with canaries: its latest canary step, that step's agreement and baseline, how many steps were
    judged, and the step its current judge drift began at (None: none)."""
    found = await runs.each(redis, run_ids, lambda pipe, run: pipe.hgetall(keys.canaries(run)))
    rows = []
    for run_id, (fields,) in zip(run_ids, found, strict=True):
        if steps := canaries.parse(fields):
            latest = steps[-1]
            rows.append(
                {
                    "run_id": run_id,
                    "step": latest.step,
                    "agreement": latest.agreement,
                    "baseline": latest.baseline,
                    "judged_steps": len(steps),
                    "drift_since": canaries.drifting_since(steps),
                }
            )
    return rows


async def arm_phases(redis: Redis, keys: Keys, run_ids: list[str]) -> list[dict[str, Any]]:
    """Each Rubric-ARM run: what its latest decided step trains and why, and its phase's span."""
    found = await runs.each(redis, run_ids, lambda pipe, run: pipe.hgetall(keys.arm_phases(run)))
    rows = []
    for run_id, (fields,) in zip(run_ids, found, strict=True):
        if decided := arm.parse_decisions(fields):
            latest = decided[max(decided)]
            rows.append(
                {
                    "run_id": run_id,
                    "step": latest.step,
                    "training": latest.training,
                    "why": latest.why,
                    "phase": arm.explain(latest),
                    "decided_steps": len(decided),
                }
            )
    return rows


def money(cost: float | None) -> str:
    return "-" if cost is None else f"{cost:.4f}" if cost >= 0.01 else f"{cost:.6f}"


def render(report: dict[str, Any], namespace: str) -> str:
    short = lambda s: s.removeprefix(namespace + ":")  # noqa: E731
    rows = []
    for s in report["streams"]:
        groups = [
            [g["group"], len(g["consumers"]), g["pending"], g["lag"], ago(g["oldest_pending_age_s"])]
            for g in s["groups"]
        ]
        rows += [[short(s["stream"]), s["length"], *g] for g in groups or [["-", "", "", "", ""]]]
    out = [
        f"namespace {namespace}",
        "",
        table(rows, ["STREAM", "LENGTH", "GROUP", "CONSUMERS", "PENDING", "LAG", "OLDEST PENDING"]),
    ]
    consumers = [
        [short(s["stream"]), g["group"], c["name"], c["pending"], ago(c["idle_s"])]
        for s in report["streams"]
        for g in s["groups"]
        for c in g["consumers"]
    ]
    if consumers:
        out += ["", table(consumers, ["STREAM", "GROUP", "CONSUMER", "PENDING", "IDLE"])]
    runs = [
        [
            r["run_id"],
            r["version"] or "-",
            "-" if r["step"] is None else r["step"],
            r["rubrics"] or "-",
            r["rubrics_ready_for_step"] if r["rubrics_ready_for_step"] is not None else "-",
            f"{r['instance_sets']} (max v{r['max_instance_version']})" if r["instance_sets"] else "-",
        ]
        for r in report["rubrics"]
    ]
    out += [
        "",
        table(runs, ["RUN", "VERSION", "FROM STEP", "RUBRICS", "READY FOR STEP", "INSTANCE SETS"])
        if runs
        else "no rubric sets",
    ]
    scheduled = [
        [r["run_id"], r["step"], r["meta_class"] or "-", r["reason"], r["strategy"], r["decided_steps"]]
        for r in report["schedules"]
    ]
    if scheduled:
        header = ["RUN", "LATEST STEP", "ACTIVE CLASS", "REASON", "STRATEGY", "DECIDED STEPS"]
        out += ["", table(scheduled, header)]
    judged = [
        [r["run_id"], r["step"], share(r["agreement"]), share(r["baseline"]), r["judged_steps"]]
        + ["-" if r["drift_since"] is None else f"since step {r['drift_since']}"]
        for r in report["canaries"]
    ]
    if judged:
        out += ["", table(judged, ["RUN", "CANARY STEP", "AGREEMENT", "BASELINE", "CANARY STEPS", "JUDGE DRIFT"])]
    split = [
        [r["run_id"], r["step"], v["rubric_id"], f"{v['split']} of {v['voted']}", share(v["split"] / v["voted"])]
        for r in report["votes"]
        for v in r["rubrics"]
    ]
    if split:
        out += ["", table(split, ["RUN", "LATEST STEP", "RUBRIC", "VOTES SPLIT", "SHARE"])]
    phases = [[r["run_id"], r["step"], r["training"], r["phase"], r["decided_steps"]] for r in report["arm_phases"]]
    if phases:
        out += ["", table(phases, ["RUN", "LATEST STEP", "TRAINS", "PHASE", "DECIDED STEPS"])]
    spent = [
        [r["run_id"], a["agent"], a["model"], a["calls"], a["cache_hits"], a["prompt_tokens"], a["completion_tokens"]]
        + [money(a["cost"])]
        for r in report["usage"]
        for a in r["agents"]
    ]
    if spent:
        header = ["RUN", "AGENT", "MODEL", "CALLS", "CACHE HITS", "PROMPT TOKENS", "COMPLETION TOKENS", "COST"]
        out += ["", table(spent, header)]
    return "\n".join(out)
