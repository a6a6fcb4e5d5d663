"""`rubricd arm`: Rubric-ARM training. Import a run's preference pairs, write each phase's training prompts, and
set or show the run's phases."""

import argparse
import json
import sys
from pathlib import Path

import msgspec

from rubricd.messages import Plan
from rubricd_services.llm import LLMClient
from rubricd_services.settings import load
from rubricd_services.state import arm
from rubricd_services.state.arm import explain

from .context import Context, Failed, clock, table

HELP = """\
Rubric-ARM trains a rubric generator and a judge from preference pairs, in
alternating phases; the arm service (`rubricd serve arm`) rewards both.

  import RUN FILE     the run's preference pairs (JSONL: prompt, chosen,
                      rejected, optional reference and id), grouped by prompt;
                      replaces what the run had
  dataset RUN         each phase's training prompts, as JSONL rows a trainer
                      loads (TRL: `prompt` is a chat): --phase generator, one
                      row per prompt; --phase judge --generator MODEL, one row
                      per comparison and order, under the rubrics the frozen
                      generator MODEL wrote (asked now through the generator
                      agent's endpoint, once per prompt, and kept for the
                      judge's rewards)
  phases RUN          the run's phase of each step decided so far; with
                      --first/--steps/--warm-up/--simultaneous, the run's own
                      plan (in place of the arm service's RUBRICD_ARM_*)

Docs: researchers/rubric-arm.md, "Training the generator and the judge".
"""


SUMMARY = "Rubric-ARM training: import preference pairs, write training prompts, set or show the phases"


def arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="arm_command", required=True, metavar="COMMAND")
    i = sub.add_parser("import", help="import a run's preference pairs (JSONL)")
    i.add_argument("run_id", metavar="RUN")
    i.add_argument("file", metavar="FILE", type=Path)
    i.set_defaults(handler=import_pairs)
    d = sub.add_parser("dataset", help="write a phase's training prompts (JSONL)")
    d.add_argument("run_id", metavar="RUN")
    d.add_argument("--phase", choices=["generator", "judge"], required=True)
    d.add_argument("--generator", metavar="MODEL", help="judge phase: the frozen generator the judge's rubrics are by")
    d.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    d.set_defaults(handler=dataset)
    h = sub.add_parser("phases", help="set or show a run's phases")
    h.add_argument("run_id", metavar="RUN")
    h.add_argument("--first", choices=["generator", "judge"], help="the phase the run starts in")
    h.add_argument("--steps", type=int, metavar="K", help="steps of each phase")
    h.add_argument("--warm-up", type=int, metavar="W", help="steps of the first phase before the alternation")
    h.add_argument("--simultaneous", action="store_true", help="both phases every step")
    h.add_argument("--json", action="store_true", help="one JSON object per decided step")
    h.set_defaults(handler=phases)


async def import_pairs(args: argparse.Namespace, ctx: Context) -> int:
    try:
        found = arm.read_preferences(args.file.read_bytes(), args.run_id, str(args.file))
    except (OSError, arm.InvalidPreferences) as e:
        raise Failed(str(e)) from None
    async with ctx.redis() as redis:
        await arm.write_prompts(redis, ctx.keys, args.run_id, found)
    pairs = sum(len(p.comparisons) for p in found)
    print(f"run {args.run_id}: {pairs} preference pairs over {len(found)} prompts imported")
    return 0


async def dataset(args: argparse.Namespace, ctx: Context) -> int:
    # The arm service's own module (it loads the clients' wiring, the memory's among them): imported when the command
    # runs, so that the other commands start without it and no CLI module imports a service (tests/cli/test_imports).
    from rubricd_services.arm.dataset import Dataset
    from rubricd_services.arm.settings import DatasetSettings
    from rubricd_services.rubrics.generation import GENERATOR

    if args.phase == "judge" and not args.generator:
        raise Failed("--phase judge needs --generator MODEL: the frozen generator whose rubrics the judge is shown")
    settings = load(DatasetSettings)
    made = Dataset(settings)
    async with ctx.redis() as redis:
        found = await arm.read_prompts(redis, ctx.keys, args.run_id)
        if not found:
            raise Failed(f"run {args.run_id!r} has no preference pairs (rubricd arm import)")
        if args.phase == "generator":
            rows = made.generator_rows(found)
        else:
            async with LLMClient.from_settings(settings, [GENERATOR], redis) as llm:
                await llm.detect([GENERATOR])
                rows = await made.judge_rows(redis, ctx.keys, llm, args.run_id, found, args.generator)
    out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    finally:
        if args.output:
            out.close()
            print(f"{len(rows)} {args.phase} rows written to {args.output}", file=sys.stderr)
    return 0


async def phases(args: argparse.Namespace, ctx: Context) -> int:
    given = {"first": args.first, "phase_steps": args.steps, "warm_up_steps": args.warm_up}
    given = {k: v for k, v in given.items() if v is not None}
    async with ctx.redis() as redis:
        if given or args.simultaneous:
            try:
                plan = msgspec.convert({**given, "simultaneous": args.simultaneous}, Plan)
            except msgspec.ValidationError as e:
                raise Failed(f"invalid plan: {e}") from None
            await arm.write_plan(redis, ctx.keys, args.run_id, plan)
            print(f"run {args.run_id}: {describe(plan)} (steps already decided keep their phase)")
            return 0
        own = await arm.read_plan(redis, ctx.keys, args.run_id)
        decided = await arm.read_decisions(redis, ctx.keys, args.run_id)
    if args.json:
        for d in decided.values():
            print(msgspec.json.encode(d).decode())
        return 0
    print(f"plan: {describe(own) if own else 'the arm service settings (RUBRICD_ARM_*)'}")
    if decided:
        rows = [[s, d.training, d.why, clock(d.decided_at), explain(d)] for s, d in decided.items()]
        print(table(rows, ["step", "trains", "why", "decided", "phase"]))
    else:
        print("no step decided yet")
    return 0


def describe(plan: Plan) -> str:
    if plan.simultaneous:
        return "both phases every step"
    warm_up = f"{plan.warm_up_steps} warm-up steps, then " if plan.warm_up_steps else ""
    return f"{plan.first} first, {warm_up}{plan.phase_steps} steps each in turn"
