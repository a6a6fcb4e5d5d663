"""The alternating reward's part of the report: each step's active meta-class and why, and the side by side
with the same seed under `weighted_sum` (final per-class means, steps to reach the target on each class).

A class's mean at a step is over the step's scores where the class is defined (Score.meta_class_scores); the
active class is the one the step's Scores name, its reason the schedule's decision (`rubricd schedule RUN`).
"""

from rubricd.messages import HEALTHBENCH_AXES

from .trainer import Run, StepRecord


def classes(run: Run) -> list[str]:
    """The meta-classes scored in the run (and the run it is compared with), HealthBench's order first."""
    runs = [run] + ([run.compared_with] if run.compared_with else [])
    seen = {c for r in runs for record in r.records for c in record.class_means}
    return [c for c in HEALTHBENCH_AXES if c in seen] + sorted(seen - set(HEALTHBENCH_AXES))


def means(record: StepRecord, names: list[str]) -> str:
    """ "accuracy 0.40  completeness 0.75": one step's class means."""
    return "  ".join(f"{c} {record.class_means[c]:.2f}" for c in names if c in record.class_means) or "-"


def step_line(record: StepRecord) -> str:
    """The console line under a step of an alternating run (or its twin): the class, why, the class means."""
    why = f" ({record.schedule})" if record.schedule else ""
    names = [c for c in HEALTHBENCH_AXES if c in record.class_means] + sorted(
        set(record.class_means) - set(HEALTHBENCH_AXES)
    )
    return f"         class {record.active_meta_class or '-'}{why} | class means: {means(record, names)}"


def reached(run: Run, meta_class: str) -> int | None:
    """How many steps the run took until a step's mean of `meta_class` reached the target (None: never)."""
    for n, record in enumerate(run.records, start=1):
        if record.class_means.get(meta_class, -1.0) >= run.target:
            return n
    return None


def final(run: Run, meta_class: str) -> float | None:
    return run.records[-1].class_means.get(meta_class) if run.records else None


def rows(run: Run) -> list[list[str]]:
    """Per class: final mean and steps to the target, this run's then the compared run's."""
    twin = run.compared_with
    out = []
    for c in classes(run):
        cells = []
        for r in (run, twin):
            f, n = (final(r, c), reached(r, c)) if r else (None, None)
            cells += ["-" if f is None else f"{f:.2f}", "not reached" if n is None else str(n)]
        out.append([c, *cells])
    return out


def headers(run: Run) -> list[str]:
    twin = run.compared_with.reward_policy if run.compared_with else "-"
    return [
        "meta-class",
        f"final mean ({run.reward_policy})",
        f"steps to {run.target:g} ({run.reward_policy})",
        f"final mean ({twin})",
        f"steps to {run.target:g} ({twin})",
    ]


def summary_lines(run: Run) -> list[str]:
    """The terminal summary's schedule and side by side."""
    lines = ["  schedule (step: class): " + ", ".join(f"{r.step}: {r.active_meta_class or '-'}" for r in run.records)]
    if run.compared_with:
        lines.append(f"  side by side with {run.compared_with.reward_policy} ({run.compared_with.run_id}, same seed):")
        lines += ["    " + " | ".join(row) for row in [headers(run), *rows(run)]]
    return lines


def markdown(run: Run) -> list[str]:
    """The report's schedule table and side by side."""
    names = classes(run)
    out = [
        "## Meta-class schedule",
        "",
        f"Reward policy `{run.reward_policy}`: each step's reward is the score of its active meta-class alone "
        "(`-`: none, the weighted total), decided once per step by the scorers' schedule (`rubricd schedule "
        f"{run.run_id}`). Class means: each class's mean score over the step's rollouts.",
        "",
        "![mean score per meta-class per step](classes.png)",
        "",
        "| step | active class | why | " + " | ".join(names) + " |",
        "|---:|---|---|" + "---:|" * len(names),
    ]
    for r in run.records:
        cells = [f"{r.class_means[c]:.2f}" if c in r.class_means else "-" for c in names]
        out.append(f"| {r.step} | {r.active_meta_class or '-'} | {r.schedule or '-'} | " + " | ".join(cells) + " |")
    out.append("")
    if run.compared_with:
        twin = run.compared_with
        out += [
            f"## Side by side with {twin.reward_policy}",
            "",
            f"The same policy, seed ({run.seed}) and start, rewarded with `{twin.reward_policy}` (run "
            f"`{twin.run_id}`, its report beside this one): each class's mean at the last step, and the steps "
            f"until a step's mean reached {run.target:g}.",
            "",
            "| " + " | ".join(headers(run)) + " |",
            "|---|---:|---:|---:|---:|",
            *("| " + " | ".join(row) + " |" for row in rows(run)),
            "",
        ]
    return out
