"""Evolving a run's rubrics from one step summary into at most one new version.

Plain async Python: a test hands in a memory, a rubric store and an `ask` function (the LLM) and needs no
broker. Static and dynamic memory (`memory`) feed the updater agent's proposal (`messages`); `proposal.validate`
keeps the changes that respect the rules; the new version is written with the store's compare-and-set, at most
one per step, in the order the summaries arrive. The loop: docs/researchers/amaris.md.
"""

import time
from dataclasses import dataclass, field

import msgspec

from rubricd import wire
from rubricd.history import modifications
from rubricd.messages import (
    EventKind,
    RubricKind,
    RubricSet,
    RubricsUpdated,
    StepSummary,
    Strategy,
)
from rubricd.store import RubricStore
from rubricd_services.llm.usage import Ask
from rubricd_services.memory.store import Memory, MemoryKind
from rubricd_services.rubrics.seeds import Seeds

from .memory import describe, dynamic_memory, memory_item, static_memory
from .prompting import UPDATER, MemoryBudget, Prompts, updater_messages
from .proposal import Limits, Rejection, UpdateProposal, proposal_type, validate


@dataclass
class Outcome:
    """What handling one step summary did."""

    kind: EventKind  # one of RUBRICS_UPDATED, RUBRICS_UNCHANGED, RUBRICS_REANNOUNCED
    current: RubricSet
    update: RubricsUpdated | None = None
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
    memory: Memory
    ask: Ask
    prompts: Prompts
    seeds: Seeds
    limits: Limits = Limits()
    budget: MemoryBudget = MemoryBudget()
    prompt_chars: int | None = None  # the updater agent's prompt budget (LLMSettings.prompt_chars)

    async def update(self, summary: StepSummary, instance_key: str | None) -> Outcome:
        """Propose, validate and publish; the caller holds the run's update lock."""
        current = await current_set(self.store, summary.run_id, instance_key, self.seeds)
        done = await self.store.made_from(summary.run_id, instance_key, summary.step)  # a redelivered summary
        if done is not None:
            return Outcome(EventKind.RUBRICS_REANNOUNCED, current, update=await self.recorded(done))
        started = time.monotonic()
        static = await static_memory(self.memory, summary, instance_key, self.budget)
        recent_s = time.monotonic() - started
        queries, dynamic, searched_s = await dynamic_memory(
            self.memory, summary, self.ask, self.prompts.query_writer, self.budget
        )
        messages = updater_messages(
            self.prompts.updater, summary, current, static, dynamic, self.limits, self.prompt_chars
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
        if not await self.store.publish(new):
            raise Conflict(
                f"rubric set {summary.run_id}/{instance_key} moved past version {current.version} during the update"
            )
        update = RubricsUpdated(
            run_id=new.run_id,
            version=new.version,
            previous_version=current.version,
            instance_key=instance_key,
            step=new.step,
            strategy=proposal.strategy,
            modifications=checked.accepted,
            updated_at=new.created_at,
        )
        await self.memory.put([memory_item(update, describe(update, proposal.rationale, consulted, checked.rejected))])
        outcome.kind, outcome.current, outcome.update = EventKind.RUBRICS_UPDATED, new, update
        return outcome

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
        update = RubricsUpdated(
            run_id=done.run_id,
            version=done.version,
            previous_version=done.version - 1,
            instance_key=done.instance_key,
            step=done.step,
            strategy=Strategy.CORRECTIVE,
            modifications=modifications(previous.rubrics if previous else [], done.rubrics),
            updated_at=done.created_at,
        )
        await self.memory.put(
            [memory_item(update, describe(update, "recorded after a restart; the proposal's rationale was lost"))]
        )
        return update


class Conflict(Exception):
    """Another writer published a version first; the summary is retried (and then found applied)."""
