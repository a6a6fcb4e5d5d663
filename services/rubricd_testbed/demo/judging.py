"""The group judging part of the report (`--judge group`): per step, the judge's prompt tokens and calls per
rollout and the analyst's calls, beside the same seed judged one rollout at a time (`Run.judged_alone`), and
whether the hacks were still caught.

A step's figures are the run's LLM usage read after the step's rubric update (its scores, analyses, summary
and update done), less the step before's.
"""

import statistics

from rubricd_services.judges.verdicts import JUDGE

from .trainer import Run, StepRecord

ANALYZER = "analyzer"  # the analyst's agent in a run's usage (analyzer.analysis.ANALYZER: the demo imports no service)


def spent(run: Run, agent: str, figure: str) -> list[int]:
    """Each step's `figure` (calls, prompt_tokens) for `agent`."""
    totals = [getattr(r, figure).get(agent, 0) for r in run.records]
    return [now - before for now, before in zip(totals, [0, *totals[:-1]], strict=True)]


def per_rollout(run: Run, figure: str) -> float | None:
    """The judge's `figure` per rollout over the run."""
    rollouts = sum(sum(r.counts.values()) for r in run.records)
    return sum(spent(run, JUDGE, figure)) / rollouts if rollouts else None


def hacks(record: StepRecord, run: Run) -> str:
    """The hacks' mean reward at the step (-: none sampled)."""
    found = [record.mean_reward[h] for h in run.task.hacks if h in record.mean_reward]
    return f"{statistics.fmean(found):.2f}" if found else "-"


def headers() -> list[str]:
    return [
        "step",
        "judge prompt tokens / rollout (group)",
        "(alone)",
        "judge calls / rollout (group)",
        "(alone)",
        "analysis calls (group)",
        "(alone)",
        "hack reward (group)",
        "(alone)",
        "uninformative rubrics (group)",
    ]


def rows(run: Run) -> list[list[str]]:
    twin = run.judged_alone
    assert twin is not None
    out = []
    figures = [
        (spent(r, JUDGE, "prompt_tokens"), spent(r, JUDGE, "calls"), spent(r, ANALYZER, "calls")) for r in (run, twin)
    ]
    for i, (mine, theirs) in enumerate(zip(run.records, twin.records, strict=False)):
        n, m = sum(mine.counts.values()), sum(theirs.counts.values())
        (tokens, calls, analyses), (tokens_alone, calls_alone, analyses_alone) = figures
        out.append(
            [
                str(mine.step),
                f"{tokens[i] / n:.0f}",
                f"{tokens_alone[i] / m:.0f}",
                f"{calls[i] / n:.2f}",
                f"{calls_alone[i] / m:.2f}",
                str(analyses[i]),
                str(analyses_alone[i]),
                hacks(mine, run),
                hacks(theirs, twin),
                ", ".join(mine.update.uninformative) if mine.update and mine.update.uninformative else "-",
            ]
        )
    return out


def ratio(run: Run, figure: str = "prompt_tokens") -> str:
    """The judge's `figure` per rollout, grouped and alone, and how many times fewer group judging spends."""
    twin = run.judged_alone
    grouped, alone = per_rollout(run, figure), per_rollout(twin, figure) if twin else None
    if not grouped or alone is None:
        return "-"
    times = f"{alone / grouped:.1f}x fewer" if alone >= grouped else f"{grouped / alone:.1f}x more"
    return f"{grouped:.0f} vs {alone:.0f} judge {figure.replace('_', ' ')} per rollout ({times})"


def summary_lines(run: Run) -> list[str]:
    if run.judged_alone is None:
        return []
    both = f"{ratio(run)}; {ratio(run, 'completion_tokens')}"
    return [f"  judged in groups of {run.group_size} vs alone ({run.judged_alone.run_id}, same seed): {both}"]


def markdown(run: Run) -> list[str]:
    twin = run.judged_alone
    if twin is None:
        return []
    return [
        "## Judged as groups, beside judged alone",
        "",
        f"The policy samples {run.group_size} responses per prompt; this run judges each group in one call "
        f"(`judge_mode` group) and analyses the sample `{run.analysis_sample}` of each group, run `{twin.run_id}` "
        f"(its report beside this one) the same seed with the defaults: one rollout judged at a time, and "
        f"`{twin.analysis_sample}` analysed: {ratio(run)}; {ratio(run, 'completion_tokens')}. Judged alone, a response seen before reuses its "
        "verdict (the judge cache), which a group's call does not. Per step: the judge's prompt tokens and calls per "
        "rollout, the analyst's calls, the hacks' mean reward (the loop still catches a hack when it falls after "
        "the update that follows it), and the rubrics the step's health found uninformative (no group's responses "
        "differed on them).",
        "",
        "| " + " | ".join(headers()) + " |",
        "|---:|" + "---:|" * (len(headers()) - 2) + "---|",
        *("| " + " | ".join(row) + " |" for row in rows(run)),
        "",
    ]
