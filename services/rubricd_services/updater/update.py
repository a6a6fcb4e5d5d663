"""Evolving a run's rubrics from one step summary into at most one new version.

Plain async Python: a test hands in a memory, a rubric store and an `ask` function (the LLM) and needs no
broker. Static and dynamic memory (`memory`) feed the updater agent's proposal (`messages`); `proposal.validate`
keeps the changes that respect the rules; the new version is written with the store's compare-and-set, at most
one per step, in the order the summaries arrive. The loop: docs/researchers/amaris.md. With promotion gated the
proposal is a candidate instead, judged in shadow; at its last shadow step the gate (`gate`) promotes the
modifications that earn it, or rejects them: docs/researchers/promotion.md.
"""

import time
from dataclasses import dataclass, field

import msgspec

from rubricd import wire
from rubricd.messages import (
    Candidate,
    EventKind,
    PromotionPlan,
    RolloutAnalysis,
    RubricKind,
    RubricModification,
    RubricSet,
    RubricsUpdated,
    StepSummary,
    Strategy,
)
from rubricd_services.llm.usage import Ask
from rubricd_services.memory.store import Memory, MemoryKind
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.state import promotion
from rubricd_services.state.canaries import steps as canary_steps
from rubricd_services.state.history import modifications
from rubricd_services.state.promotion import Candidates
from rubricd_services.state.rubric_sets import RubricStore

from . import gate
from .memory import describe, dynamic_memory, memory_item, rejection_item, static_memory
from .prompting import UPDATER, MemoryBudget, Prompts, Refused, refused, updater_messages
from .proposal import Limits, Rejection, UpdateProposal, proposal_type, validate

IMMEDIATE = PromotionPlan()
REJECTIONS_SHOWN = 3  # the candidates whose refused changes the updater's prompt shows (promotion gated)


@dataclass
class Outcome:
    """What handling one step summary did."""

    kind: EventKind  # one of UPDATE_OUTCOMES
    current: RubricSet
    update: RubricsUpdated | None = None
    candidate: Candidate | None = None  # proposed, in shadow, or decided (promotion gated)
    proposal: UpdateProposal | None = None
    rejected: list[Rejection] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    consulted: list[str] = field(default_factory=list)
    retrieval_s: float = 0.0  # the memory's reads for the prompt (recent summaries, searches), not the LLM's


async def current_set(store: RubricStore, run_id: str, instance_key: str | None, seeds: Seeds) -> RubricSet:
    """The rubric set in force; a run without one is seeded, as the scorer would."""
    current = await store.current(run_id, instance_key)
    if current is None:
        current = await store.seed(
            RubricSet(run_id=run_id, instance_key=instance_key, version=1, rubrics=seeds.rubrics(instance_key))
        )
    return current


@dataclass
class RubricUpdater:
    """Turns a step summary into at most one new rubric set version."""

    store: RubricStore
    candidates: Candidates  # promotion gated
    memory: Memory
    ask: Ask
    prompts: Prompts
    seeds: Seeds
    limits: Limits = Limits()
    budget: MemoryBudget = MemoryBudget()
    prompt_chars: int | None = None  # the updater agent's prompt budget (LLMSettings.prompt_chars)

    async def update(self, summary: StepSummary, instance_key: str | None, plan: PromotionPlan = IMMEDIATE) -> Outcome:
        """Propose, validate and publish (or, under `plan` gated, put in shadow); decide a candidate whose shadow
        steps are over. The caller holds the run's update lock."""
        current = await current_set(self.store, summary.run_id, instance_key, self.seeds)
        if (settled := await self.settled(summary, instance_key, current)) is not None:
            return settled
        started = time.monotonic()
        static = await static_memory(self.memory, summary, instance_key, self.budget)
        recent_s = time.monotonic() - started
        queries, dynamic, searched_s = await dynamic_memory(
            self.memory, summary, self.ask, self.prompts.query_writer, self.budget
        )
        rejected = await self.rejected(summary.run_id, instance_key) if plan.promotion == "gated" else []
        messages = updater_messages(
            self.prompts.updater, summary, current, static, dynamic, self.limits, self.prompt_chars, rejected
        )
        adaptive = tuple(r.id for r in current.rubrics if r.kind is RubricKind.ADAPTIVE)
        answer_type = proposal_type(adaptive, tuple(h.id for h in dynamic or []), self.limits.meta_classes)
        answer = await self.ask(summary.run_id, UPDATER, messages, answer_type)
        proposal = msgspec.convert(msgspec.to_builtins(answer), UpdateProposal)  # the shared types, not the call's
        known = {h.id for h in dynamic or []}
        consulted = [i for i in proposal.consulted if i in known]
        checked = validate(current.rubrics, proposal.modifications, self.limits)
        outcome = Outcome(
            EventKind.RUBRICS_UNCHANGED,
            current,
            proposal=proposal,
            rejected=checked.rejected,
            queries=queries,
            consulted=consulted,
            retrieval_s=recent_s + searched_s,
        )
        if not checked.accepted:
            return outcome
        new = RubricSet(
            run_id=summary.run_id,
            instance_key=instance_key,
            version=current.version + 1,
            rubrics=checked.rubrics,
            step=summary.step,
            created_at=time.time(),
        )
        if plan.promotion == "gated":
            candidate = Candidate(
                run_id=summary.run_id,
                instance_key=instance_key,
                step=summary.step,
                until=summary.step + plan.shadow_steps,
                base_version=current.version,
                rubrics=new,
                strategy=proposal.strategy,
                rationale=proposal.rationale,
                modifications=checked.accepted,
                hacking=[p.type for p in summary.reward_hacking],
                honest_margin=plan.honest_margin,
                interference_margin=plan.interference_margin,
                proposed_at=new.created_at,
            )
            if not await self.candidates.propose(candidate):
                raise Conflict(f"rubric set {summary.run_id}/{instance_key} moved during the proposal")
            outcome.kind, outcome.candidate = EventKind.RUBRICS_PROPOSED, candidate
            return outcome
        if not await self.store.publish(new):
            raise Conflict(
                f"rubric set {summary.run_id}/{instance_key} moved past version {current.version} during the update"
            )
        update = announcement(new, proposal.strategy, checked.accepted, new.created_at)  # new follows current
        await self.memory.put([memory_item(update, describe(update, proposal.rationale, consulted, checked.rejected))])
        outcome.kind, outcome.current, outcome.update = EventKind.RUBRICS_UPDATED, new, update
        return outcome

    async def settled(self, summary: StepSummary, instance_key: str | None, current: RubricSet) -> Outcome | None:
        """The outcome of a summary that makes no proposal: one redelivered after its step made a version or a
        candidate (announced again), or one that arrives while a candidate is in shadow (the gate's step); None
        for a summary to propose from."""
        shadowing = await self.candidates.shadowing(summary.run_id, instance_key, summary.step)
        if shadowing.decided is not None:
            return await self.decided(shadowing.decided, current)
        done = await self.store.made_from(summary.run_id, instance_key, summary.step)
        if done is not None:
            return Outcome(EventKind.RUBRICS_REANNOUNCED, current, update=await self.recorded(done))
        if shadowing.proposed is not None:
            return Outcome(EventKind.RUBRICS_PROPOSED, current, candidate=shadowing.proposed)
        if shadowing.pending is not None:
            return await self.shadowed(shadowing.pending, current, summary)
        return None

    async def rejected(self, run_id: str, instance_key: str | None) -> list[Refused]:
        """The changes of the run's last REJECTIONS_SHOWN candidates that the gate refused."""
        steps = (await self.candidates.steps(run_id, instance_key))[-REJECTIONS_SHOWN:]
        return refused(await self.candidates.proposed(run_id, instance_key, steps))

    async def shadowed(self, pending: Candidate, current: RubricSet, summary: StepSummary) -> Outcome:
        """A step while a candidate is in shadow: no proposal; at its last shadow step (or after, if no rollout was
        judged under it yet, for at most as many steps again), the gate's decision."""
        run, instance = pending.run_id, pending.instance_key
        moved = current.version != pending.base_version
        if summary.step < pending.until and not moved:
            return Outcome(EventKind.RUBRICS_IN_SHADOW, current, candidate=pending)
        shadow = await promotion.read(self.store.redis, self.store.keys, run, pending.step, instance)
        if not shadow and not moved and summary.step < 2 * pending.until - pending.step:
            return Outcome(EventKind.RUBRICS_IN_SHADOW, current, candidate=pending)
        analyses = await self.memory.recent(
            run,
            MemoryKind.ANALYSIS,
            limit=min(10_000, 2 * len(shadow) + 100),
            instance_key=instance,
            after_step=pending.step,
            before_step=summary.step + 1,
        )
        read = [wire.decode(a.message, RolloutAnalysis) for a in analyses if a.message]
        found = gate.evidence(read, pending.hacking)
        window = list(range(pending.step + 1, summary.step + 1))
        canaries = await canary_steps(self.store.redis, self.store.keys, run, window) if instance is None else []
        decision, promoted = gate.decide(pending, current, shadow, found, self.limits, summary.step, canaries)
        decided = msgspec.structs.replace(pending, decision=decision)
        if not await self.candidates.decide(decided, promoted):
            raise Conflict(f"rubric set {run}/{instance} moved during the gate's decision")
        records = [rejection_item(decided)] if any(not c.passed for c in decision.checks) or not promoted else []
        await self.memory.put(records)
        return await self.decided(decided, promoted or current, record=True)

    async def decided(self, candidate: Candidate, current: RubricSet, *, record: bool = False) -> Outcome:
        """The outcome of a decided candidate: its promoted version's announcement (recorded in memory the first
        time), or its rejection."""
        assert candidate.decision is not None
        version = candidate.decision.version
        if candidate.decision.outcome == "rejected" or version is None:
            return Outcome(EventKind.RUBRICS_REJECTED, current, candidate=candidate)
        promoted = msgspec.structs.replace(candidate.rubrics, version=version, step=candidate.step)
        update = announcement(
            promoted, candidate.strategy, gate.promoted_modifications(candidate), candidate.decision.decided_at
        )
        if record:
            await self.memory.put([memory_item(update, describe(update, candidate.rationale))])
        return Outcome(EventKind.RUBRICS_PROMOTED, current, update=update, candidate=candidate)

    async def recorded(self, done: RubricSet) -> RubricsUpdated:
        """The announcement of a version made earlier (a redelivered summary), from memory if recorded there.

        A crash between publishing the version and recording it leaves no record:
        the announcement is then rebuilt from the difference to the previous
        version, and recorded.
        """
        records = await self.memory.recent(
            done.run_id,
            MemoryKind.RUBRIC_UPDATE,
            limit=5,
            instance_key=done.instance_key,
            before_step=(done.step or 0) + 1,
        )
        for item in records:
            if item.ref == str(done.version) and item.message:
                return wire.decode(item.message, RubricsUpdated)
        previous = await self.store.version(done.run_id, done.instance_key, done.version - 1)
        changed = modifications(previous.rubrics if previous else [], done.rubrics)
        update = announcement(done, Strategy.CORRECTIVE, changed, done.created_at)
        await self.memory.put(
            [memory_item(update, describe(update, "recorded after a restart; the proposal's rationale was lost"))]
        )
        return update


def announcement(
    made: RubricSet, strategy: Strategy, changes: list[RubricModification], at: float | None
) -> RubricsUpdated:
    """The announcement of the version `made` (it follows the one before it), made by `changes` at `at`."""
    return RubricsUpdated(
        run_id=made.run_id,
        version=made.version,
        previous_version=made.version - 1,
        instance_key=made.instance_key,
        step=made.step,
        strategy=strategy,
        modifications=changes,
        updated_at=at,
    )


class Conflict(Exception):
    """Another writer published a version first; the summary is retried (and then found applied)."""
