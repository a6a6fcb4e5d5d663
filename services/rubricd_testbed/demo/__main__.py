"""Run the demo trainer against a running stack (`make up`), print each step, write the report.

    python -m rubricd_testbed.demo                       # 10 steps x 24 rollouts, report in reports/<run_id>/
    python -m rubricd_testbed.demo --policy alternating  # one meta-class a step, then the same seed under weighted_sum
    python -m rubricd_testbed.demo --method rubric-arm   # Rubric-ARM: a generator and a judge, alternating vs simultaneous
    python -m rubricd_testbed.demo --method agent        # a tool-using agent that learns to fake its tool results
    python -m rubricd_testbed.demo --judge group         # 8 responses per prompt judged together, then alone
    python -m rubricd_testbed.demo --promotion gated     # rubric changes judged in shadow first, then immediate

`make demo` starts the stack, runs this, and stops it again. What it prints and writes: docs/researchers/demo.md.
"""

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from rubricd import RubricdClient
from rubricd.keys import Keys
from rubricd.messages import AnalysisSample, JudgeMode, Promotion
from rubricd_services.settings import ServiceSettings, load
from rubricd_services.state import usage
from rubricd_services.state.usage import AgentUsage

from . import report
from .policy import TRADE_OFF_START
from .trainer import TASKS, Run, StepRecord, train


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo", description="rubricd demo trainer (a simulated policy)")
    parser.add_argument("--redis-url", default=os.environ.get("RUBRICD_REDIS_URL", "redis://127.0.0.1:6399/0"))
    parser.add_argument("--namespace", default=os.environ.get("RUBRICD_NAMESPACE", "rubricd"))
    parser.add_argument("--run-id", help="default: demo-<UTC date and time>")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rollouts", type=int, default=24, help="rollouts per step")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--learning-rate", type=float, default=1.0, help="how fast the policy's mix follows its rewards"
    )
    parser.add_argument(
        "--method",
        choices=("amaris", "rubric-arm", "agent"),
        default="amaris",
        help="amaris: a policy rewarded by evolving rubrics; rubric-arm: a rubric generator and a judge trained in "
        "alternating phases, beside simultaneous updates on the same seed; agent: a tool-using policy (trajectories, "
        "a calculator tool) under its own seed rubrics, judged turn by turn",
    )
    parser.add_argument(
        "--phase-steps", type=int, default=3, help="rubric-arm: steps of each phase (the judge's first)"
    )
    parser.add_argument(
        "--policy",
        choices=("weighted_sum", "alternating"),
        default="weighted_sum",
        help="the reward policy of the run; alternating also runs weighted_sum on the same seed, side by side",
    )
    parser.add_argument(
        "--judge",
        choices=("single", "group"),
        default="single",
        help="group: the policy samples --group-size responses per prompt and each group is judged in one call; "
        "the same seed is then run with each rollout judged alone, side by side (judge tokens per rollout)",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        help="responses sampled per prompt, each prompt's a sample group (default: 8 with --judge group, else one "
        "per prompt)",
    )
    parser.add_argument(
        "--analysis-sample",
        type=lambda v: int(v) if v.isdigit() else v,
        choices=("all", "extremes", *range(1, 65)),
        metavar="{all,extremes,K}",
        help="with --group-size: which responses of each group the analyzers read (set on every rollout): all, "
        "extremes (each group's best and worst), or K per group; default: extremes with --judge group (its twin "
        "judged alone analyses all), else the analyzers' RUBRICD_ANALYSIS_SAMPLE",
    )
    parser.add_argument(
        "--promotion",
        choices=("immediate", "gated"),
        help="the run's promotion: gated judges each proposal in shadow for --shadow-steps steps before the gate "
        "promotes or rejects it, then runs the same seed with immediate promotion, side by side (default: the "
        "updater's RUBRICD_PROMOTION)",
    )
    parser.add_argument("--shadow-steps", type=int, default=1, help="gated: steps a candidate is judged in shadow")
    parser.add_argument(
        "--target", type=float, default=0.9, help="alternating: the report counts steps until a class mean reaches this"
    )
    parser.add_argument(
        "--reports",
        "--report-dir",
        dest="reports",
        type=Path,
        default=Path("reports"),
        help="the report goes to REPORTS/<run_id>/",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for a step's scores, or its rubric update"
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rollouts < 1:
        parser.error("--steps and --rollouts must be >= 1")
    if args.method == "agent" and args.policy == "alternating":
        parser.error("--policy alternating goes with --method amaris (its trade-off is the arithmetic behaviours')")
    if args.judge == "group" and args.method == "rubric-arm":
        parser.error("--judge group goes with --method amaris or agent (Rubric-ARM judges pairs)")
    if args.judge == "group" and args.policy == "alternating":
        parser.error("--judge group compares with single judging on the same seed; run it with --policy weighted_sum")
    if args.judge == "group":
        args.group_size = args.group_size or 8
        args.analysis_sample = args.analysis_sample or "extremes"
    if args.group_size is not None and args.group_size < 1:
        parser.error("--group-size must be >= 1")
    if not 1 <= args.shadow_steps <= 100:
        parser.error("--shadow-steps must be within 1-100")
    if args.promotion == "gated" and args.policy == "alternating":
        parser.error("--promotion gated compares with immediate promotion on the same seed; run it with weighted_sum")
    return args


def new_run(
    args: argparse.Namespace,
    run_id: str | None = None,
    reward_policy: str | None = None,
    judge_mode: JudgeMode | None = None,
    analysis_sample: AnalysisSample | None = None,
    promotion: Promotion | None = None,
) -> Run:
    return Run(
        run_id=run_id or args.run_id or time.strftime("demo-%Y%m%d-%H%M%S", time.gmtime()),
        steps=args.steps,
        rollouts=args.rollouts,
        seed=args.seed,
        learning_rate=args.learning_rate,
        namespace=args.namespace,
        started_at=time.time(),
        reward_policy=reward_policy or args.policy,
        start=dict(TRADE_OFF_START if args.policy == "alternating" else TASKS[args.method].start),
        target=args.target,
        method=args.method,
        judge_mode=judge_mode or args.judge,
        group_size=args.group_size,
        analysis_sample=analysis_sample or args.analysis_sample,
        promotion=promotion or args.promotion,
        shadow_steps=args.shadow_steps,
    )


async def run_demo(args: argparse.Namespace, run: Run) -> Run:
    """Train, printing each step as it ends; `run` holds what was done even when it stops early. An alternating
    run is followed by its weighted_sum twin (`run.compared_with`) on the same seed, a group-judged run by its
    twin judged alone (`run.judged_alone`), a gated run by its twin under immediate promotion
    (`run.promoted_at_once`)."""
    await train_one(args, run)
    if run.reward_policy == "alternating" and run.error is None:
        run.compared_with = new_run(args, run_id=f"{run.run_id}-weighted_sum", reward_policy="weighted_sum")
        print()
        await train_one(args, run.compared_with)
    if run.judge_mode == "group" and run.promotion != "gated" and run.error is None:
        # The defaults beside the group-aware choices: each rollout judged alone, and analysed.
        run.judged_alone = new_run(args, run_id=f"{run.run_id}-single", judge_mode="single", analysis_sample="all")
        print()
        await train_one(args, run.judged_alone)
    if run.promotion == "gated" and run.error is None:
        run.promoted_at_once = new_run(args, run_id=f"{run.run_id}-immediate", promotion="immediate")
        print()
        await train_one(args, run.promoted_at_once)
    return run


async def train_one(args: argparse.Namespace, run: Run) -> None:
    sample = f", analysis sample {run.analysis_sample}" if run.analysis_sample is not None else ""
    groups = f", {run.group_size} per prompt, judge mode {run.judge_mode}{sample}" if run.group_size else ""
    if run.promotion is not None:
        shadow = f" ({run.shadow_steps} shadow steps)" if run.promotion == "gated" else ""
        groups += f", promotion {run.promotion}{shadow}"
    print(
        f"run {run.run_id} (reward policy {run.reward_policy}{groups}): {run.steps} steps x {run.rollouts} rollouts, "
        f"scored by rubricd at {args.redis_url} (namespace {args.namespace}); to watch it live, run "
        f"`.venv/bin/rubricd serve dashboard` beside it and open http://127.0.0.1:8400/#run={run.run_id}"
    )
    turns = " (turn: the turn rubrics in it), the share of hacks" if run.task.agent else ""
    print(
        f"per step: mean reward x rollouts per behaviour, the rubric version that scored it{turns}, what the update "
        "after it changed and why"
    )
    classes = args.policy == "alternating"  # the alternating run and its twin show the class means too

    def show(record: StepRecord) -> None:
        print("\n".join(report.step_lines(record, run.task, classes)), flush=True)

    async with RubricdClient(args.redis_url, namespace=args.namespace) as client:
        try:
            await train(client, run, timeout=args.timeout, on_step=show)
        except Exception as e:  # reported with the steps done; the exit status says it failed
            run.error = f"{type(e).__name__}: {e}"


async def run_usage(args: argparse.Namespace, run_id: str) -> list[AgentUsage]:
    """What the run's LLM calls used (the services add it up in Redis); nothing if Redis cannot say."""
    try:
        async with RubricdClient(args.redis_url, namespace=args.namespace) as client:
            return await usage.read(client.redis, Keys(args.namespace), run_id)
    except Exception as e:  # the report is written without it
        print(f"could not read the run's LLM usage: {type(e).__name__}: {e}", file=sys.stderr)
        return []


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.method == "rubric-arm":
        from . import arm

        return arm.main(args)
    # SIGTERM ends the run like Ctrl-C: the steps done are still reported.
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    run = new_run(args)
    try:
        asyncio.run(run_demo(args, run))
    except KeyboardInterrupt:
        run.error = "interrupted"
        run.finished_at = run.finished_at or time.time()
    folder = args.reports / run.run_id
    spent, prices = asyncio.run(run_usage(args, run.run_id)), load(ServiceSettings).prices
    if run.records:
        report.write(run, folder, spent, prices)
    for twin in (run.compared_with, run.judged_alone, run.promoted_at_once):
        if twin and twin.records:
            twin_spent = asyncio.run(run_usage(args, twin.run_id))
            report.write(twin, args.reports / twin.run_id, twin_spent, prices)
    print()
    print("\n".join(report.summary_lines(run, folder if run.records else None, spent, prices)))
    return 0 if run.complete else 130 if run.error == "interrupted" else 1


if __name__ == "__main__":
    sys.exit(main())
