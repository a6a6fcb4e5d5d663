"""The promotion gate: which of a candidate's modifications earn their place, from its shadow scores.

Plain Python over the shadow scores (rubricd_services.state.promotion) and the analyses of the shadow steps: no broker, no LLM.
Each modification is priced alone against the set in force, rollout by rollout under the rollout's own policy:
an added or modified rubric must separate responses within a group, no modification may favour the rollouts
flagged for the hacking the proposal answered over the honest ones, nor lower the honest ones' reward by more than
the margin; and the passing modifications together must put the flagged rollouts below the honest ones (relative
to the set in force) when the proposal answered hacking that the shadow steps still show. Where the judge's canaries
were judged with the candidate's rubrics in their calls too, their agreement with the labels may not fall by more
than the interference margin. The rules, and what they cannot see: docs/researchers/promotion.md.
"""

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rubricd.messages import (
    Action,
    Candidate,
    GateCheck,
    GateDecision,
    Interference,
    RolloutAnalysis,
    Rubric,
    RubricModification,
    RubricSet,
)
from rubricd_services.rubrics.policies import policy
from rubricd_services.state.canaries import CanaryStep
from rubricd_services.state.promotion import ShadowScore

from .proposal import Limits, validate


@dataclass(frozen=True)
class Evidence:
    """What the analyses of the shadow steps say of their rollouts: `flagged`, analysed with the hacking the
    proposal answered (any hacking, if it answered none); `honest`, analysed with none."""

    flagged: frozenset[str] = frozenset()
    honest: frozenset[str] = frozenset()


def evidence(analyses: Iterable[RolloutAnalysis], hacking: Sequence[str]) -> Evidence:
    flagged, honest = set(), set()
    for analysis in analyses:
        types = {h.type for h in analysis.reward_hacking}
        if not types:
            honest.add(analysis.rollout_id)
        elif not hacking or types & set(hacking):
            flagged.add(analysis.rollout_id)
    return Evidence(frozenset(flagged), frozenset(honest))


def decide(
    candidate: Candidate,
    current: RubricSet,
    shadow: Mapping[str, ShadowScore],
    found: Evidence,
    limits: Limits,
    step: int,
    canaries: Sequence[CanaryStep] = (),
) -> tuple[GateDecision, RubricSet | None]:
    """The gate's decision at `step`, and the version it promotes (None: rejected); `canaries`: the run's canary
    steps of the shadow window."""
    canary = interference(candidate, canaries)

    def rejected(
        reason: str,
        checks: Sequence[GateCheck] = (),
        flagged_delta: float | None = None,
        honest_delta: float | None = None,
    ) -> GateDecision:
        return GateDecision(
            outcome="rejected",
            step=step,
            checks=list(checks),
            shadow_scores=len(shadow),
            flagged_delta=flagged_delta,
            honest_delta=honest_delta,
            canaries=canary,
            reason=reason,
            decided_at=time.time(),
        )

    if current.version != candidate.base_version:
        return rejected(f"the set in force moved from v{candidate.base_version} to v{current.version}"), None
    if not shadow:
        return rejected("no rollout was judged under the candidate in its shadow steps"), None
    checks = [_check(m, current, shadow, found, candidate.honest_margin, limits) for m in candidate.modifications]
    if canary is not None and not canary.passed:
        reason = (
            f"with the candidate's rubrics in the same calls the canaries' agreement with their labels falls from "
            f"{canary.agreement:.3f} to {canary.with_candidate:.3f} (interference margin "
            f"{candidate.interference_margin:g})"
        )
        return rejected(reason, checks), None
    passing = [m for m, c in zip(candidate.modifications, checks, strict=True) if c.passed]
    if not passing:
        return rejected("no modification passed", checks), None
    together = validate(current.rubrics, passing, limits)
    flagged_delta = _mean_delta(current.rubrics, together.rubrics, _changed(passing), shadow, found.flagged)
    honest_delta = _mean_delta(current.rubrics, together.rubrics, _changed(passing), shadow, found.honest)
    if candidate.hacking and (favours := _advantage(flagged_delta, honest_delta)) is not None and favours >= 0:
        reason = f"the passing modifications do not lower the rollouts flagged for {', '.join(candidate.hacking)} below the honest ones"
        return rejected(reason, checks, flagged_delta, honest_delta), None
    promoted = RubricSet(
        run_id=current.run_id,
        instance_key=current.instance_key,
        version=current.version + 1,
        rubrics=together.rubrics,
        step=candidate.step,
        created_at=time.time(),
    )
    decision = GateDecision(
        outcome="promoted",
        step=step,
        version=promoted.version,
        checks=checks,
        shadow_scores=len(shadow),
        flagged_delta=flagged_delta,
        honest_delta=honest_delta,
        canaries=canary,
        reason="" if len(passing) == len(checks) else f"{len(checks) - len(passing)} of {len(checks)} failed",
        decided_at=promoted.created_at,
    )
    return decision, promoted


def interference(candidate: Candidate, canaries: Sequence[CanaryStep]) -> Interference | None:
    """The canary steps judged with `candidate`, compared: the same items' labelled verdicts without and with its
    rubrics in the calls (None: no such step)."""
    steps = [c for c in canaries if c.candidate_step == candidate.step and c.verdicts and c.candidate_verdicts]
    if not steps:
        return None
    agreement = sum(c.agreed for c in steps) / sum(c.verdicts for c in steps)
    with_candidate = sum(c.candidate_agreed for c in steps) / sum(c.candidate_verdicts for c in steps)
    return Interference(
        steps=[c.step for c in steps],
        verdicts=sum(c.verdicts for c in steps),
        agreement=round(agreement, 6),
        with_candidate=round(with_candidate, 6),
        passed=with_candidate >= agreement - candidate.interference_margin - 1e-9,
    )


def promoted_modifications(candidate: Candidate) -> list[RubricModification]:
    """The modifications of a decided candidate that its decision promoted."""
    if candidate.decision is None or candidate.decision.outcome != "promoted":
        return []
    passed = [c.passed for c in candidate.decision.checks]
    return [m for m, ok in zip(candidate.modifications, passed, strict=True) if ok]


def _check(
    mod: RubricModification,
    current: RubricSet,
    shadow: Mapping[str, ShadowScore],
    found: Evidence,
    margin: float,
    limits: Limits,
) -> GateCheck:
    applied = validate(current.rubrics, [mod], limits)
    rubric_id = mod.rubric_id or ""
    if not applied.accepted:
        reason = applied.rejected[0].reason if applied.rejected else "invalid on the set in force"
        return GateCheck(action=mod.action, rubric_id=rubric_id, passed=False, reasons=[reason])
    changed = _changed([mod])
    reasons = []
    groups = spread = 0
    if changed:
        groups, spread = _spread(rubric_id, shadow)
        if not spread:
            reasons.append(f"uninformative: in none of {groups} groups did some responses meet it and others not")
    flagged_delta = _mean_delta(current.rubrics, applied.rubrics, changed, shadow, found.flagged)
    honest_delta = _mean_delta(current.rubrics, applied.rubrics, changed, shadow, found.honest)
    if (favours := _advantage(flagged_delta, honest_delta)) is not None and favours > 0:
        reasons.append(f"favours the rollouts flagged for hacking over the honest ones by {favours:+.3f}")
    if honest_delta is not None and honest_delta < -margin:
        reasons.append(f"lowers the honest rollouts' reward by {-honest_delta:.3f} (margin {margin:g})")
    return GateCheck(
        action=mod.action,
        rubric_id=rubric_id,
        passed=not reasons,
        reasons=reasons,
        groups=groups,
        groups_with_spread=spread,
        flagged=_count(shadow, found.flagged),
        flagged_delta=flagged_delta,
        honest=_count(shadow, found.honest),
        honest_delta=honest_delta,
    )


def _advantage(flagged: float | None, honest: float | None) -> float | None:
    """How much more a change gives the flagged rollouts than the honest ones (rewards are normalized: a rubric
    that pays the hack shows as the honest rewards' fall as much as the flagged ones' rise)."""
    if flagged is None:
        return None
    return round(flagged - (honest or 0.0), 6)


def _changed(mods: Iterable[RubricModification]) -> frozenset[str]:
    """The rubrics of `mods` judged in shadow (added and modified), by id."""
    return frozenset(m.rubric_id for m in mods if m.action in (Action.ADD, Action.MODIFY) and m.rubric_id)


def _spread(rubric_id: str, shadow: Mapping[str, ShadowScore]) -> tuple[int, int]:
    """(groups, groups with spread) of a changed rubric over the shadow scores; ungrouped rollouts are one group."""
    counts: dict[str, list[int]] = {}
    for s in shadow.values():
        n_met = counts.setdefault(s.group or "", [0, 0])
        n_met[0] += 1
        n_met[1] += rubric_id in s.changed
    return len(counts), sum(0 < met < n for n, met in counts.values())


def _count(shadow: Mapping[str, ShadowScore], rollouts: frozenset[str]) -> int:
    return sum(r in shadow for r in rollouts)


def _mean_delta(
    before: Sequence[Rubric],
    after: Sequence[Rubric],
    changed: frozenset[str],
    shadow: Mapping[str, ShadowScore],
    rollouts: frozenset[str],
) -> float | None:
    """The mean change of `rollouts`' reward from the rubrics `before` to those `after` (whose `changed` ones take
    their shadow verdicts); None without such a rollout with a reward both ways."""
    deltas = []
    for rollout_id in rollouts:
        s = shadow.get(rollout_id)
        if s is None:
            continue
        met, met_changed = set(s.met), set(s.changed)
        then = policy(s.policy)(before, {r.id: r.id in met for r in before}, active=s.active)
        now_met = {r.id: (r.id in met_changed) if r.id in changed else (r.id in met) for r in after}
        now = policy(s.policy)(after, now_met, active=s.active)
        if then.total is not None and now.total is not None:
            deltas.append(now.total - then.total)
    return round(sum(deltas) / len(deltas), 6) if deltas else None
