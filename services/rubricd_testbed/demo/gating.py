"""The promotion part of the report (`--promotion gated`): per step, the version in force, the candidate in shadow,
the gate's decision with its figures, the hacks' and the honest answers' reward under the set in force and under
the candidate; beside the same seed under immediate promotion (`Run.promoted_at_once`): when the hacks' reward
first fell below the honest answers', and the judge's prompt tokens per rollout.
"""

import statistics

from rubricd.messages import EventKind
from rubricd_services.judges.verdicts import JUDGE

from .judging import spent
from .trainer import Run, StepRecord


def _mean(means: dict[str, float], counts: dict[str, int], behaviours: list[str]) -> float | None:
    """The mean reward over `behaviours`, each weighted by its rollouts."""
    weights = [(means[b], counts.get(b, 0)) for b in behaviours if b in means and counts.get(b)]
    total = sum(n for _, n in weights)
    return sum(m * n for m, n in weights) / total if total else None


def rewards(run: Run, record: StepRecord, candidate: bool = False) -> tuple[float | None, float | None]:
    """(hacks, honest answers): their mean reward at the step, under the set in force or the candidate."""
    means = record.candidate_reward if candidate else record.mean_reward
    hacks = [b for b in run.task.behaviours if b in run.task.hacks]
    honest = [b for b in run.task.behaviours if b not in run.task.hacks]
    return _mean(means, record.counts, hacks), _mean(means, record.counts, honest)


def caught_at(run: Run) -> dict[str, int | None]:
    """Each hack the policy found during the run: the first step from then on at which it earned less than the best
    honest behaviour (None: never)."""
    found = {r.discovered: r.step for r in run.records if r.discovered}
    honest = [b for b in run.task.behaviours if b not in run.task.hacks]
    caught: dict[str, int | None] = {}
    for hack, since in found.items():
        caught[hack] = next(
            (
                r.step
                for r in run.records
                if r.step >= since
                and hack in r.mean_reward
                and any(r.mean_reward[hack] < r.mean_reward[b] for b in honest if b in r.mean_reward)
            ),
            None,
        )
    return caught


def gate(record: StepRecord) -> str:
    """What the updater's gate did after the step, with its figures."""
    u = record.update
    if u is None:
        return "-"
    f = u.fields
    match u.outcome:
        case EventKind.RUBRICS_PROPOSED:
            return f"candidate v{f.get('candidate_version')} proposed, in shadow to step {f.get('shadow_until')}"
        case EventKind.RUBRICS_IN_SHADOW:
            return "in shadow"
        case EventKind.RUBRICS_PROMOTED | EventKind.RUBRICS_REJECTED:
            decided = "promoted" if u.outcome == EventKind.RUBRICS_PROMOTED else "rejected"
            figures = f"{f.get('passed')} passed, {f.get('failed')} failed on {f.get('shadow_scores')} rollouts"
            deltas = ", ".join(
                f"{name} {value:+.3f}"
                for name in ("flagged_delta", "honest_delta")
                if isinstance(value := f.get(name), int | float)
            )
            alone, beside = f.get("canary_agreement"), f.get("canary_agreement_with_candidate")
            canaries = (
                f"canaries {alone:.2f} alone, {beside:.2f} with it"
                if isinstance(alone, int | float) and isinstance(beside, int | float)
                else ""
            )
            said = "; ".join(filter(None, [figures, deltas, canaries]))
            return f"**{decided}** ({said}){': ' + u.rationale if u.rationale else ''}"
    return str(u.outcome)


def _step(step: int | None) -> str:
    return "-" if step is None else str(step)


def _delay(gated: int | None, immediate: int | None) -> str:
    return "" if gated is None or immediate is None else f": {gated - immediate:+d} step(s) gated"


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(run: Run) -> list[str]:
    twin = run.promoted_at_once
    if run.promotion != "gated" or twin is None:
        return []
    tokens = [spent(r, JUDGE, "prompt_tokens") for r in (run, twin)]
    out = [
        "## Promotion: gated beside immediate",
        "",
        f"Each proposal was a candidate judged in shadow for {run.shadow_steps} step(s), the trainer rewarded by the "
        f"version in force, then promoted or rejected by the gate (docs/researchers/promotion.md); `{twin.run_id}` "
        "is the same seed with every proposal in force at once. Hack and honest: the mean reward of the hack "
        "behaviours and of the others; under the candidate: what the candidate in shadow would have given them.",
        "",
        "| step | in force | candidate | hack | honest | hack (candidate) | honest (candidate) | judge prompt tokens / "
        "rollout | (immediate) | hack (immediate) | gate after the step |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for i, r in enumerate(run.records):
        hack, honest = rewards(run, r)
        shadow_hack, shadow_honest = rewards(run, r, candidate=True)
        theirs = twin.records[i] if i < len(twin.records) else None
        n = sum(r.counts.values())
        mine_tokens = f"{tokens[0][i] / n:.0f}" if n else "-"
        their_tokens = f"{tokens[1][i] / sum(theirs.counts.values()):.0f}" if theirs and i < len(tokens[1]) else "-"
        cells = [
            str(r.step),
            "v" + ",".join(map(str, r.rubric_versions)),
            f"v{r.candidate_version}" if r.candidate_version else "-",
            _cell(hack),
            _cell(honest),
            _cell(shadow_hack),
            _cell(shadow_honest),
            mine_tokens,
            their_tokens,
            _cell(rewards(twin, theirs)[0]) if theirs else "-",
            gate(r).replace("|", "\\|"),
        ]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", *(f"- {line.strip()}" for line in summary_lines(run)), ""]
    return out


def summary_lines(run: Run) -> list[str]:
    twin = run.promoted_at_once
    if run.promotion != "gated" or twin is None:
        return []
    outcomes = [r.update.outcome for r in run.records if r.update]
    gated, at_once = caught_at(run), caught_at(twin)
    tokens = [sum(spent(r, JUDGE, "prompt_tokens")) for r in (run, twin)]
    rollouts = [sum(sum(x.counts.values()) for x in r.records) for r in (run, twin)]
    per = [t / n if n else None for t, n in zip(tokens, rollouts, strict=True)]
    shadow_steps = [r for r in run.records if r.candidate_version is not None]
    ratio = f"{per[0] / per[1]:.2f}x" if per[0] and per[1] else "-"
    lines = [
        f"  promotion gated: {outcomes.count(EventKind.RUBRICS_PROPOSED)} candidate(s), "
        f"{outcomes.count(EventKind.RUBRICS_PROMOTED)} promoted, {outcomes.count(EventKind.RUBRICS_REJECTED)} "
        f"rejected; {len(shadow_steps)} step(s) judged in shadow",
        *(
            f"  {hack}, found at step {found}, earned less than an honest behaviour from step {_step(step)} (gated) "
            f"and {_step(at_once.get(hack))} (immediate, {twin.run_id}){_delay(step, at_once.get(hack))}"
            for hack, step in gated.items()
            for found in [next(r.step for r in run.records if r.discovered == hack)]
        ),
        f"  judge prompt tokens per rollout over the run: {per[0] or 0:.0f} gated, {per[1] or 0:.0f} immediate ({ratio})",
    ]
    if shadow_steps:
        hack = [h for r in shadow_steps if (h := rewards(run, r)[0]) is not None]
        if hack:
            lines.append(
                f"  the hacks' reward in the shadow steps, under the version in force: {statistics.fmean(hack):.2f}"
            )
    return lines
