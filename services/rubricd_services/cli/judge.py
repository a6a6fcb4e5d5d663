"""`rubricd judge eval LABELLED`: how well one judge configuration, or several side by side, agrees with labelled
verdicts; `rubricd judge canaries RUN LABELLED`: the labelled set a run's canaries are drawn from."""

import argparse
from pathlib import Path

import msgspec

from rubricd.canaries import drifting_since, read
from rubricd_services.evaluation import labelled

from .context import Context, Failed, share, table

HELP = """\
Judges every item of a labelled JSONL file (a rollout, its rubrics, and per
rubric whether it is met; or HealthBench's meta-evaluation data, labelled by
its graders' majority; or labelled comparisons, for the pairwise judge, with
position consistency besides) as the scorer (or the comparer) would, with no verdict cache, once per
--judge configuration, and prints per configuration: agreement with the labels
over every rubric verdict (accuracy, balanced accuracy, macro-F1 over met / not
met, Cohen's kappa) overall and per meta-class, the mean reward error per item
(judge reward vs labelled reward, both the weighted sum), format failures
(items with no usable verdict), latency p50/p95 and tokens per call, and the
cost (RUBRICD_PRICES); with several graders per rubric, the judge's agreement
with each grader and the graders' with each other (pairwise).

With --probes, each item is judged again with a note to the grader asking for
full marks (must never raise the reward), with filler padding (must not raise
it), with its rubrics reordered (must not change a verdict) and unchanged
(consistency): the share of items each moved, raised or changed, the
distribution of the moves, and whether the probe passed.

Without --judge: the judge the scorer's settings give (RUBRICD_LLM__*,
RUBRICD_AGENTS__JUDGE__*, RUBRICD_JUDGE_PROMPT).
"""

SPEC = "name=NAME,model=M,base_url=URL,output_mode=MODE,temperature=T,prompt=FILE,... (any judge LLM setting)"


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("judge", help="measure a judge: agreement with labelled verdicts")
    sub = p.add_subparsers(dest="judge_command", required=True, metavar="COMMAND")
    e = sub.add_parser(
        "eval",
        help="judge a labelled set with one or several judge configurations; agreement, errors, latency, cost",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    e.add_argument("labelled", metavar="LABELLED", type=Path, help="labelled JSONL (docs: researchers/judges)")
    e.add_argument("--judge", action="append", default=[], metavar="SPEC", help=f"a configuration: {SPEC}")
    e.add_argument(
        "--probes",
        action="store_true",
        help="judge every item again under each probe (grader note, padding, rubrics reordered, repeated): 4x calls",
    )
    e.add_argument("--png", type=Path, metavar="PATH", help="write a plot: agreement against cost per call")
    e.add_argument("--json", action="store_true", help="one JSON object: every configuration's figures and verdicts")
    e.set_defaults(handler=run)
    c = sub.add_parser(
        "canaries",
        help="set (or --clear, or show) the labelled set a run's canaries are drawn from during training",
        description="The scorers judge a few of the set's items per step of RUN with the run's judge and record "
        "their agreement with the labels (rubricd status, the dashboard, judge_drift events). A run's own set "
        "replaces RUBRICD_CANARY_SET. Without LABELLED: the run's canary steps so far.",
    )
    c.add_argument("run_id", metavar="RUN")
    c.add_argument("labelled", metavar="LABELLED", type=Path, nargs="?", help="labelled JSONL (judge eval's format)")
    c.add_argument("--clear", action="store_true", help="the run goes back to RUBRICD_CANARY_SET")
    c.set_defaults(handler=canaries)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    # The command runs the scorer's judge: imported when it runs, as `serve` imports a service, so the other
    # commands (read-models of Redis) never load a service.
    from rubricd_services.evaluation import command

    return await command.run(args, ctx)


async def canaries(args: argparse.Namespace, ctx: Context) -> int:
    async with ctx.redis() as redis:
        if args.clear:
            await redis.delete(ctx.keys.canary_set(args.run_id))
            print(f"run {args.run_id}: canaries from RUBRICD_CANARY_SET (if set)")
        elif args.labelled is not None:
            try:
                items = labelled.read(args.labelled)
            except (OSError, labelled.Invalid) as e:
                raise Failed(str(e)) from None
            if not items:
                raise Failed(f"{args.labelled}: no labelled item")
            # Kept in rubricd's format whichever was read (HealthBench's: labelled by the graders' majority).
            await redis.set(ctx.keys.canary_set(args.run_id), b"\n".join(msgspec.json.encode(i) for i in items))
            print(f"run {args.run_id}: canaries from {args.labelled} ({len(items)} items)")
        else:
            steps = await read(redis, ctx.keys, args.run_id)
            rows = [
                (c.step, c.rubric_version, c.verdicts, share(c.agreement), share(c.kappa), share(c.baseline))
                + ("yes" * c.drift,)
                for c in steps
            ]
            print(table(rows, ("step", "version", "verdicts", "agreement", "kappa", "baseline", "drift")))
            if (since := drifting_since(steps)) is not None:
                print(f"judge drift since step {since}")
    return 0
