"""What the demo prints step by step, and the report folder it writes.

`reports/<run_id>/`: report.md (settings, the per-step table, the rubric
history with each change's rationale, the plots, the LLM tokens and cost per
agent; an agent run's trajectories turn by turn with their verdicts),
rewards.png, rubrics.png and run.json (everything recorded, for your own
analysis).
"""

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from rubricd.messages import Action, EventKind, RubricModification
from rubricd_services.settings import LLMSettings, Price
from rubricd_services.state.usage import AgentUsage, total_cost

from . import compare, gating, judging, plots, transcript
from .policy import Task
from .trainer import Run, StepRecord, Update


def cell(record: StepRecord, behaviour: str) -> str:
    """ "0.43 x5": mean reward and rollouts of one behaviour at one step ("-" when it was not sampled)."""
    if behaviour not in record.mean_reward:
        return "-" if not record.counts[behaviour] else f"failed x{record.counts[behaviour]}"
    return f"{record.mean_reward[behaviour]:.2f} x{record.counts[behaviour]}"


def versions(record: StepRecord) -> str:
    return ",".join(f"v{v}" for v in record.rubric_versions)


def turn_rubrics(record: StepRecord) -> str:
    return ", ".join(record.turn_rubrics) or "none"


def hack_share(record: StepRecord, task: Task) -> str:
    """The share of the batch a hack wrote."""
    return f"{sum(record.counts[h] for h in task.hacks) / max(1, sum(record.counts.values())):.0%}"


def change(m: RubricModification) -> str:
    """One modification as "+ id (points, meta class): criterion" ("meta class, per turn" for a turn rubric)."""
    match m.action:
        case Action.ADD | Action.MODIFY:
            sign = "+" if m.action is Action.ADD else "~"
            r = m.rubric
            if r is None:
                return f"{sign} {m.rubric_id}"
            scope = ", per turn" if r.scope == "turn" else ""
            return f"{sign} {m.rubric_id} ({r.points:+g}, {r.meta_class}{scope}): {r.criterion}"
        case Action.REMOVE:
            return f"- {m.rubric_id}"
        case Action.REWEIGHT:
            return f"= {m.rubric_id} now {m.points:+g} points"
    return f"{m.action} {m.rubric_id}"


def decision(update: Update) -> str:
    """The updater's decision in one line."""
    if update.version != update.previous_version:
        return f"v{update.previous_version} -> v{update.version} ({update.strategy or 'updated'})"
    what = {
        EventKind.UPDATE_SKIPPED: "skipped",
        EventKind.UPDATE_FAILED: "failed, rubrics kept",
        EventKind.RUBRICS_PROPOSED: "a candidate in shadow",
        EventKind.RUBRICS_IN_SHADOW: "a candidate in shadow",
        EventKind.RUBRICS_REJECTED: "the gate rejected the candidate",
        "unknown": "no announcement seen",
    }
    return f"v{update.version} kept ({what.get(update.outcome, update.strategy or 'no change')})"


def step_lines(record: StepRecord, task: Task, classes: bool = False) -> list[str]:
    """The console lines of one step; with `classes`, its active meta-class and class means too; an agent's, the
    turn rubrics that scored it and the share of hacks."""
    rewards = "  ".join(f"{b} {cell(record, b)}" for b in task.behaviours)
    mean = "-" if record.mean is None else f"{record.mean:.2f}"
    if task.agent:
        rubric = (
            f"rubric {versions(record)} (turn: {turn_rubrics(record)})  mean {mean}  hacks {hack_share(record, task)}"
        )
    else:
        rubric = f"rubric {versions(record)}  mean {mean}"
    lines = [f"step {record.step:>2}  {rubric}  |  {rewards}"]
    if classes:
        lines.append(compare.step_line(record))
    if record.judge_failures:
        lines.append(f"         {record.judge_failures} judge failure(s): no reward, left out of the means")
    if record.candidate_reward:
        shadow = "  ".join(
            f"{b} {record.candidate_reward[b]:.2f}" for b in task.behaviours if b in record.candidate_reward
        )
        lines.append(f"         in shadow, candidate v{record.candidate_version} would give: {shadow}")
    if record.discovered:
        lines.append(
            f"         the policy found a new hack: {record.discovered} ({record.shares[record.discovered]:.0%} of this batch's mix)"
        )
    if u := record.update:
        if u.summary:
            lines.append(f"         step summary: {u.summary}")
        lines.append(
            f"         update after step {record.step}: {decision(u)}" + ("" if u.modifications else f": {u.rationale}")
        )
        for m in u.modifications:
            lines.append(f"           {change(m)}")
            lines.append(f"             why: {m.rationale}")
    return lines


SIMULATOR = LLMSettings().model  # the model name the simulator answers to (the settings' default)


def money(cost: float | None) -> str:
    return "no price (RUBRICD_PRICES)" if cost is None else f"{cost:.4f}" if cost >= 0.01 else f"{cost:.6f}"


def llm_used(spent: Sequence[AgentUsage]) -> str:
    """Which LLM the run's agents called: rubricd's simulator, or a real model (which)."""
    models = sorted({u.model for u in spent if u.calls})
    real = [m for m in models if m != SIMULATOR]
    if not models:
        return "the LLM: unknown (no call recorded for this run)"
    if not real:
        return "the LLM: rubricd's simulator, a test and demo tool (no model)"
    return f"the LLM: a real model, {', '.join(real)}" + (" (and the simulator)" if len(real) < len(models) else "")


def per_call(u: AgentUsage) -> str:
    return "-" if u.seconds_per_call is None else f"{u.seconds_per_call:.1f} s"


def usage_rows(spent: Sequence[AgentUsage], prices: Mapping[str, Price]) -> list[list[str]]:
    """Per agent and model: calls, time a call, verdicts from the judge cache, prompt and completion tokens, cost."""
    return [
        [u.agent, u.model, str(u.calls), per_call(u), str(u.cache_hits), str(u.prompt_tokens), str(u.completion_tokens)]
        + [money(u.cost(prices))]
        for u in spent
    ]


def usage_lines(spent: Sequence[AgentUsage], prices: Mapping[str, Price]) -> list[str]:
    """The run's LLM usage, one line per agent and model, and its total cost."""
    if not spent:
        return []
    lines = [f"  LLM usage ({llm_used(spent)}):"]
    for u in spent:
        cached = f", {u.cache_hits} verdicts from the judge cache" if u.cache_hits else ""
        lines.append(
            f"    {u.agent} ({u.model}): {u.calls} calls of {per_call(u)}{cached}, {u.prompt_tokens} prompt + "
            f"{u.completion_tokens} completion tokens, cost {money(u.cost(prices))}"
        )
    return [*lines, f"  cost of the run: {total(spent, prices)}"]


def total(spent: Sequence[AgentUsage], prices: Mapping[str, Price]) -> str:
    """The run's cost, naming the models it leaves out for want of a price."""
    unpriced = sorted({u.model for u in spent if u.model not in prices})
    cost = total_cost(spent, prices)
    if cost is None or not unpriced:
        return money(cost)
    return f"{money(cost)} (without {', '.join(unpriced)}: no price)"


def summary_lines(
    run: Run, folder: Path | None, spent: Sequence[AgentUsage] = (), prices: Mapping[str, Price] | None = None
) -> list[str]:
    """The closing summary: duration, versions, how the mix and the rewards moved, what the LLM calls cost."""
    took = (run.finished_at or run.started_at) - run.started_at
    last = run.history[-1].version if run.history else "?"
    head = f"run {run.run_id}: {len(run.records)} of {run.steps} steps x {run.rollouts} rollouts in {took:.0f} s; rubric v1 -> v{last}"
    lines = [head + ("" if run.complete else f" (stopped early: {run.error})")]
    task = run.task
    if run.records:
        first, end = run.records[0], run.records[-1]
        mix = lambda r: "  ".join(f"{b} {r.counts[b] / max(1, sum(r.counts.values())):.0%}" for b in task.behaviours)  # noqa: E731
        lines += [f"  behaviour mix, step {first.step}: {mix(first)}", f"  behaviour mix, step {end.step}: {mix(end)}"]
        for behaviour in (b for b in task.behaviours if b in task.hacks or task.agent):
            seen = [(r.step, r.mean_reward[behaviour]) for r in run.records if behaviour in r.mean_reward]
            if seen:
                path = " -> ".join(f"{m:.2f}@{s}" for s, m in seen)
                lines.append(f"  {behaviour} mean reward (value@step): {path}")
    for v in run.history[1:]:
        ids = ", ".join(
            f"{r.id} {r.points:+g}" + (" (turn)" if r.scope == "turn" else "")
            for r in v.rubrics
            if r.kind == "adaptive"
        )
        lines.append(f"  v{v.version} (from step {v.step}) adaptive rubrics: {ids}")
    if run.reward_policy == "alternating" or run.compared_with:
        lines += compare.summary_lines(run)
    lines += judging.summary_lines(run)
    lines += gating.summary_lines(run)
    lines += usage_lines(spent, prices or {})
    if folder:
        extra = ", classes.png" if run.reward_policy == "alternating" or run.compared_with else ""
        lines.append(f"report: {folder / 'report.md'} (plots: rewards.png, rubrics.png{extra}; data: run.json)")
    return lines


def write(run: Run, folder: Path, spent: Sequence[AgentUsage] = (), prices: Mapping[str, Price] | None = None) -> Path:
    """Write the report folder; returns report.md's path. `spent`: the run's LLM usage (rubricd_services.state.usage.read)."""
    folder.mkdir(parents=True, exist_ok=True)
    plots.rewards(run, folder / "rewards.png")
    plots.rubrics(run, folder / "rubrics.png")
    if run.reward_policy == "alternating" or run.compared_with:
        plots.classes(run, folder / "classes.png")
    (folder / "run.json").write_bytes(msgspec.json.format(msgspec.json.encode(run)))
    path = folder / "report.md"
    path.write_text(markdown(run, spent, prices or {}))
    return path


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def markdown(run: Run, spent: Sequence[AgentUsage] = (), prices: Mapping[str, Price] | None = None) -> str:
    took = (run.finished_at or run.started_at) - run.started_at
    task = run.task
    policy = (
        "`services/demo/agent.py`: a tool-using agent, its rollouts trajectories, under its own seed rubrics"
        if task.agent
        else "`services/demo/policy.py`"
    )
    agent = ["turn rubrics", "hacks"] if task.agent else []
    out = [
        f"# rubricd demo run `{run.run_id}`",
        "",
        f"A simulated training run scored by rubricd (the policy is {policy}; {llm_used(spent)}, "
        "see LLM tokens and cost). Synchronous mode: each step is scored with the rubrics made from the step before it.",
        "",
        "## Settings",
        "",
        f"- steps: {run.steps} ({len(run.records)} run{'' if run.complete else f'; stopped early: {run.error}'})",
        f"- rollouts per step: {run.rollouts}",
        f"- seed: {run.seed}, policy learning rate: {run.learning_rate}",
        *(
            [
                f"- {run.group_size} responses per prompt (a sample group each), judge mode `{run.judge_mode}`, "
                f"analysis sample `{'default' if run.analysis_sample is None else run.analysis_sample}`"
            ]
            if run.group_size
            else []
        ),
        f"- reward policy: `{run.reward_policy}` (set on every rollout), start mix: "
        + ", ".join(f"{b} {p:.0%}" for b, p in run.start.items()),
        f"- namespace: `{run.namespace}`",
        f"- started {_when(run.started_at)}, finished {_when(run.finished_at)} ({took:.0f} s)",
        "",
        "## Plots",
        "",
        "![mean reward per behaviour per step](rewards.png)",
        "",
        "Mean reward per behaviour per step (top) and the behaviour mix of each batch (bottom); a dashed line is a "
        "rubric update, labelled with the version it made, drawn after the step whose evidence made it.",
        "",
        "![rubric set size and points over versions](rubrics.png)",
        "",
        *(compare.markdown(run) if run.reward_policy == "alternating" or run.compared_with else []),
        *judging.markdown(run),
        *gating.markdown(run),
        "## Steps",
        "",
        "Cells: mean reward x rollouts. The update column is what the updater did with the step's summary."
        + (
            " Turn rubrics: those of the version that scored the step; hacks: the batch's share of "
            + ", ".join(task.hacks)
            + "."
            if task.agent
            else ""
        ),
        "",
        "| " + " | ".join(["step", "rubric", *agent, "mean", *task.behaviours, "update after the step"]) + " |",
        "|---:|---|" + "---|---:|" * bool(agent) + "---:|" + "---:|" * len(task.behaviours) + "---|",
    ]
    for r in run.records:
        mean = "-" if r.mean is None else f"{r.mean:.2f}"
        update = decision(r.update) if r.update else "-"
        shown = [turn_rubrics(r), hack_share(r, task)] if task.agent else []
        cells = [str(r.step), versions(r), *shown, mean, *(cell(r, b) for b in task.behaviours), update]
        out.append("| " + " | ".join(cells) + " |")
    if task.agent:
        out += ["", *transcript.markdown(run)]
    out += ["", "## What each step's summary said and what the updater did", ""]
    analysis_calls = judging.spent(run, judging.ANALYZER, "calls")
    for i, r in enumerate(run.records):
        out.append(f"### Step {r.step} (scored with rubric {versions(r)})")
        out.append("")
        if r.discovered:
            out.append(f"- The policy found a new hack: **{r.discovered}**.")
        if r.calls:
            out.append(f"- Analysis calls: {analysis_calls[i]} for {sum(r.counts.values())} rollouts.")
        if r.update:
            u = r.update
            out.append(f"- Step summary: {_md(u.summary) or '(not seen)'}")
            out.append(f"- Update: {decision(u)}. {_md(u.rationale)}")
            for m in u.modifications:
                out.append(f"  - `{change(m)}`: {_md(m.rationale)}")
        out.append("")
    out += ["## Rubric history", ""]
    for v in run.history:
        origin = "seed" if v.step is None else f"made from step {v.step}'s evidence"
        out += [
            f"### v{v.version} ({origin})",
            "",
            "| id | kind | scope | meta-class | points | criterion |",
            "|---|---|---|---|---:|---|",
        ]
        out += [
            f"| {r.id} | {r.kind} | {r.scope} | {r.meta_class} | {r.points:+g} | {_md(r.criterion)} |"
            for r in v.rubrics
        ]
        out.append("")
    if spent:
        out += [
            "## LLM tokens and cost",
            "",
            "What the run's LLM calls used, per agent and model (cost at `RUBRICD_PRICES`, per million tokens).",
            "",
            "| agent | model | calls | time a call | cached verdicts | prompt tokens | completion tokens | cost |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
            *("| " + " | ".join(row) + " |" for row in usage_rows(spent, prices or {})),
            "",
            f"Cost of the run: {total(spent, prices or {})}.",
            "",
        ]
    out += ["## Summary", "", "```", *summary_lines(run, None, spent, prices), "```", ""]
    return "\n".join(out)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
