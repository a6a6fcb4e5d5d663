"""`rubricd judge eval LABELLED`: how well one judge configuration, or several side by side, agrees with labelled
verdicts (the configurations its --judge options name, the evaluation of each, the table); `rubricd judge canaries
RUN LABELLED`: the labelled set a run's canaries are drawn from."""

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

import msgspec
from pydantic import BaseModel, ValidationError

from rubricd_services.cli.settings import EvalSettings
from rubricd_services.judges import pairwise, verdicts
from rubricd_services.judges.evaluation import labelled, pairs
from rubricd_services.judges.evaluation.labelled import Item
from rubricd_services.judges.evaluation.pairs import PairReport, evaluate_pairs
from rubricd_services.judges.evaluation.run import Config, Mode, Report, evaluate
from rubricd_services.judges.scoring import TRAJECTORY, Judging
from rubricd_services.judges.verdicts import JUDGE
from rubricd_services.runtime import prompts
from rubricd_services.settings import LLMSettings, load
from rubricd_services.state.canaries import drifting_since, read

from .context import Context, Failed, share, table

HELP = """\
Judges every item of a labelled JSONL file (a rollout, its text or its
trajectory, its rubrics, and per rubric whether it is met, a turn rubric
optionally turn by turn; or HealthBench's meta-evaluation data, labelled by
its graders' majority; or labelled comparisons, for the pairwise judge, with
position consistency besides) as the scorer (or the comparer) would, with no verdict cache, once per
--judge configuration, and prints per configuration: agreement with the labels
over every rubric verdict (accuracy, balanced accuracy, macro-F1 over met / not
met, Cohen's kappa) overall and per meta-class, the mean reward error per item
(judge reward vs labelled reward, both the weighted sum), format failures
(items with no usable verdict), latency p50/p95 and tokens per call, and the
cost (RUBRICD_PRICES); with several graders per rubric, the judge's agreement
with each grader and the graders' with each other (pairwise); with turn
rubrics labelled turn by turn, the agreement per rubric and policy turn.
--only judges the items of one kind: text, trajectories, or the items of a
sample group (groups).

--modes judges every item once per mode and adds a table of the modes side by
side (agreement, kappa, reward error, judge calls and prompt tokens per
rollout, wall time): single (each item alone), group (the items of a sample
group, those sharing a `group`, judged together in one call), votes or votesK
(K calls per item, the majority per rubric; votes: 3), group+votesK. Without
it: the scorer's RUBRICD_JUDGE_MODE and RUBRICD_JUDGE_VOTES.

With --probes, each item is judged again with a note to the grader asking for
full marks (must never raise the reward), with filler padding (must not raise
it), with its rubrics reordered (must not change a verdict) and unchanged
(consistency); and each trajectory whose final answer states its last tool
result's numbers, with those numbers changed (the reward must fall): the share
of items each moved, raised or changed, the distribution of the moves, and
whether the probe passed.

Without --judge: the judge the scorer's settings give (RUBRICD_LLM__*,
RUBRICD_AGENTS__JUDGE__*, RUBRICD_JUDGE_PROMPT, RUBRICD_JUDGE_TRAJECTORY_PROMPT,
RUBRICD_JUDGE_REASONING, RUBRICD_JUDGE_GROUP_PROMPT, RUBRICD_JUDGE_GROUP_MEMBERS).
"""

SPEC = (
    "name=NAME,model=M,base_url=URL,output_mode=MODE,temperature=T,prompt=FILE,trajectory_prompt=FILE,... "
    "(any judge LLM setting)"
)
# --only: which items are judged
KINDS: dict[str, Callable[[Item], bool]] = {
    "text": lambda i: not i.trajectory,
    "trajectories": lambda i: bool(i.trajectory),
    "groups": lambda i: i.group is not None,
}


def modes(text: str) -> list[Mode]:
    """--modes: the judge modes named, comma-separated."""
    try:
        found = [Mode.named(name) for name in text.split(",") if name.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not found or len({str(m) for m in found}) != len(found):
        raise argparse.ArgumentTypeError(f"{text!r}: name each mode once")
    return found


SUMMARY = "measure a judge: agreement with labelled verdicts"


def arguments(p: argparse.ArgumentParser) -> None:
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
        help="judge every item again under each probe (grader note, padding, rubrics reordered, repeated, a "
        "trajectory's tool result contradicted): about 5x calls",
    )
    e.add_argument(
        "--only", choices=list(KINDS), help="judge only the items of this kind (text, trajectories, or groups)"
    )
    e.add_argument(
        "--group",
        action="append",
        metavar="ID",
        help="judge only the items of this sample group (repeatable): a small sample for a slow judge",
    )
    e.add_argument(
        "--modes",
        type=modes,
        metavar="MODES",
        help="judge modes side by side, comma-separated: single, group, votes (3 calls), votesK, group+votesK",
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


def configs(specs: list[str], base: Judging, package: str, agent: str) -> list[Config]:
    """The configurations `specs` name, each over `base` (the judging the settings give): `prompt=` and
    `trajectory_prompt=` files replace its prompts, `calls=` and `explain=` its style, the other fields its LLM
    settings; a bad one fails naming its field."""
    if not specs:
        return [Config(agent, base)]
    found = []
    for n, spec in enumerate(specs, 1):
        fields = {k.strip(): v.strip() for k, _, v in (part.partition("=") for part in spec.split(",") if part)}
        name = fields.pop("name", f"judge-{n}")
        prompt = fields.pop("prompt", None)
        trajectory_prompt = fields.pop("trajectory_prompt", None)
        asked = {k: fields.pop(k) for k in ("calls", "explain") if k in fields}
        try:
            llm = LLMSettings.model_validate({**base.llm.model_dump(), **fields})
            how = JudgeStyle.model_validate({"calls": base.style.calls, "explain": base.style.explain, **asked})
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
            raise Failed(f"--judge {spec!r}: {problems}") from None
        judging = dataclasses.replace(
            base,
            llm=llm,
            template=load_prompt(package, agent, Path(prompt)) if prompt else base.template,
            trajectory_template=(
                load_prompt(package, TRAJECTORY, Path(trajectory_prompt))
                if trajectory_prompt
                else base.trajectory_template
            ),
            style=verdicts.Style(how.calls, how.explain),
        )
        found.append(Config(name, judging))
    if len({c.name for c in found}) != len(found):
        raise Failed(f"--judge names repeat: {[c.name for c in found]}")
    return found


class JudgeStyle(BaseModel):
    """A --judge option's `calls=` and `explain=`, checked as the scorer's settings are."""

    calls: verdicts.Calls
    explain: bool


def load_prompt(package: str, agent: str, path: Path | None) -> str:
    try:
        return prompts.load(package, agent, path)
    except OSError as e:
        raise Failed(f"cannot read the {agent} prompt {path}: {e}") from None


async def run(args: argparse.Namespace, ctx: Context) -> int:
    try:
        lines = args.labelled.read_text(encoding="utf-8").splitlines()
        first = next((line for line in lines if line.strip()), "")
        if '"response_a"' in first:  # labelled comparisons: the pairwise judge
            return await run_pairs(args, ctx, list(pairs.pairs(lines, str(args.labelled))))
        items = labelled.read(args.labelled)
    except (OSError, labelled.Invalid) as e:
        raise Failed(str(e)) from None
    if args.only:
        items = [i for i in items if KINDS[args.only](i)]
    if args.group:
        items = [i for i in items if i.group in args.group]
    if not items:
        raise Failed(f"{args.labelled}: no labelled item{f' of {args.only}' if args.only else ''}")
    settings = load(EvalSettings)
    try:
        judging = Judging.of(settings, settings.agent(JUDGE))
    except OSError as e:
        raise Failed(f"cannot read a judge prompt: {e}") from None
    found = [
        dataclasses.replace(c, name=f"{c.name}/{mode}" if args.modes else c.name, mode=mode)
        for c in configs(args.judge, judging, verdicts.__package__, JUDGE)
        for mode in args.modes or [Mode(settings.judge_mode, settings.judge_votes)]
    ]
    reports = []
    async with ctx.redis() as redis:
        for config in found:
            reports.append(
                await evaluate(
                    config, items, settings.prices, probe=args.probes, redis=redis, namespace=ctx.keys.namespace
                )
            )
    print(msgspec.json.encode(reports).decode() if args.json else render(reports, side_by_side=bool(args.modes)))
    if args.png:
        from rubricd_services.judges.evaluation.plot import agreement_vs_cost  # matplotlib: only when asked

        agreement_vs_cost(reports, args.png)
    return 0


async def run_pairs(args: argparse.Namespace, ctx: Context, items: list[pairs.Pair]) -> int:
    """Labelled comparisons, judged by the pairwise judge (the comparer's settings and prompt)."""
    if given := next(
        (o for o, v in (("--probes", args.probes), ("--only", args.only), ("--modes", args.modes)) if v), None
    ):
        raise Failed(f"{given} applies to labelled rollouts, not to labelled comparisons")
    if styled := [spec for spec in args.judge if "calls=" in spec or "explain=" in spec]:
        raise Failed(f"calls= and explain= apply to the rollout judge, not to the pairwise judge: {styled}")
    if not items:
        raise Failed(f"{args.labelled}: no labelled comparison")
    settings = load(EvalSettings)
    package, agent = pairwise.__package__, pairwise.PAIRWISE
    try:
        judging = Judging.pairwise(settings, settings.agent(agent))
    except OSError as e:
        raise Failed(f"cannot read the {agent} prompt {settings.pairwise_prompt}: {e}") from None
    reports = []
    async with ctx.redis() as redis:
        for config in configs(args.judge, judging, package, agent):
            reports.append(
                await evaluate_pairs(config, items, settings.prices, redis=redis, namespace=ctx.keys.namespace)
            )
    print(msgspec.json.encode(reports).decode() if args.json else render_pairs(reports))
    if args.png:
        from rubricd_services.judges.evaluation.plot import agreement_vs_cost  # matplotlib: only when asked

        agreement_vs_cost(reports, args.png)
    return 0


def render_pairs(reports: list[PairReport]) -> str:
    rows = [row(r, r.position_consistency) for r in reports]
    return table(rows, columns("pairs", "consistency"))


def row(r: Report | PairReport, own: float | None) -> list[object]:
    """A configuration's line of the table; `own`: the figure of its kind (reward error, position consistency)."""
    a = r.overall
    return [
        *(r.name, r.model, r.output_mode, r.items, r.format_failures),
        *(_f(a.accuracy), _f(a.balanced_accuracy), _f(a.macro_f1), _f(a.kappa), _f(own)),
        *(_f(r.latency_p50_s, 2), _f(r.latency_p95_s, 2)),
        *(_f(r.prompt_tokens_per_call, 0), _f(r.completion_tokens_per_call, 0), _f(r.cost, 4)),
    ]


def columns(items: str, own: str) -> list[str]:
    """The table's header, for `row`."""
    first = ["judge", "model", "mode", items, "failed", "acc", "bal_acc", "macro_f1", "kappa", own]
    return [*first, "p50_s", "p95_s", "prompt_tok", "compl_tok", "cost"]


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def by_mode(reports: list[Report]) -> str:
    """The configurations' modes side by side: agreement, and what judging a rollout took."""
    rows = [
        [r.name, r.judge_mode, r.items, r.format_failures, _f(r.overall.accuracy), _f(r.overall.kappa)]
        + [_f(r.reward_error), _f(r.calls_per_rollout, 2), _f(r.prompt_tokens_per_rollout, 0), _f(r.wall_s, 2)]
        for r in reports
    ]
    header = ["judge", "judge_mode", "items", "failed", "acc", "kappa", "reward_err", "calls/rollout"]
    return table(rows, [*header, "prompt_tok/rollout", "wall_s"])


def render(reports: list[Report], side_by_side: bool = False) -> str:
    """The figures' tables; with `side_by_side`, the modes' table after the first."""
    rows = [row(r, r.reward_error) for r in reports]
    classes = [
        [r.name, c, a.n, _f(a.accuracy), _f(a.balanced_accuracy), _f(a.macro_f1), _f(a.kappa)]
        for r in reports
        for c, a in r.by_meta_class.items()
    ]
    by_class = table(classes, ["judge", "meta_class", "verdicts", "acc", "bal_acc", "macro_f1", "kappa"])
    text = table(rows, columns("items", "reward_err"))
    if side_by_side:
        text += f"\n\njudge modes side by side (per rollout: an item)\n{by_mode(reports)}"
    text += f"\n\nby meta-class\n{by_class}"
    probed = [
        [
            r.name,
            p.name,
            p.items,
            _f(p.moved),
            _f(p.raised),
            _f(p.changed),
            _f(p.mean_move),
            _f(p.min_move),
            _f(p.max_move),
            "ok" if p.passed else "FAILED",
        ]
        for r in reports
        for p in r.probes
    ]
    graded = [
        [r.name, label, a.n, _f(a.accuracy), _f(a.balanced_accuracy), _f(a.macro_f1), _f(a.kappa)]
        for r in reports
        for label, a in (("judge vs each grader", r.pairwise), ("graders vs each other", r.graders_pairwise))
        if a is not None
    ]
    turns = [
        [r.name, a.n, _f(a.accuracy), _f(a.balanced_accuracy), _f(a.macro_f1), _f(a.kappa)]
        for r in reports
        if (a := r.turns) is not None
    ]
    if turns:
        text += f"\n\nturn verdicts (turn rubrics labelled turn by turn)\n{table(turns, ['judge', 'verdicts', 'acc', 'bal_acc', 'macro_f1', 'kappa'])}"
    if graded:
        text += f"\n\nseveral graders (pairwise)\n{table(graded, ['judge', 'pairs', 'n', 'acc', 'bal_acc', 'macro_f1', 'kappa'])}"
    if probed:
        header = ["judge", "probe", "items", "moved", "raised", "changed", "mean_move", "min_move", "max_move"]
        text += f"\n\nprobes\n{table(probed, [*header, 'result'])}"
    return text
