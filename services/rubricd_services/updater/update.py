"""Evolving a run's rubrics from one step summary: memory, proposal, validation, the new version.

Plain async Python and pure functions: a test hands in a memory, a rubric store and an `ask` function (the LLM)
and needs no broker. Static and dynamic memory feed the updater agent's proposal; `validate` keeps the changes
that respect the rules and drops the others with a reason; the new version is written with the store's
compare-and-set, at most one per step, in the order the summaries arrive.
The loop: docs/researchers/amaris.md; the rules: docs/researchers/rubrics.md, "How the updater changes a set".
"""

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, TypeVar, cast

import msgspec

from rubricd import wire
from rubricd.messages import (
    HEALTHBENCH_AXES,
    Action,
    EventKind,
    Rubric,
    RubricKind,
    RubricModification,
    RubricSet,
    RubricsUpdated,
    StepSummary,
    Strategy,
)
from rubricd.store import RubricStore
from rubricd_services.common import prompts
from rubricd_services.common.memory import Hit, Memory, MemoryItem, MemoryKind
from rubricd_services.common.seeds import Seeds
from rubricd_services.rubrics.ids import new_id

T = TypeVar("T")
# (run id, agent, messages, answer type) -> an answer of that type; the call is made for that run
Ask = Callable[[str, str, list[dict[str, str]], type[T]], Awaitable[T]]

# The agents: settings `agents.<name>`, prompts prompts/<name>.md.
QUERY_WRITER = "query_writer"  # turns a step summary into searches of the run's memory
UPDATER = "updater"  # proposes the rubric modifications
_FRAME_CHARS = 200  # the memory blocks' tags and newlines
SEARCHED_KINDS = [MemoryKind.ANALYSIS, MemoryKind.STEP_SUMMARY, MemoryKind.CHUNK_SUMMARY, MemoryKind.RUBRIC_UPDATE]


# What the LLM agents return.


class MemoryQueries(msgspec.Struct, frozen=True, kw_only=True):
    """The query writer's answer: searches of the run's memory, one issue each."""

    queries: Annotated[list[Annotated[str, prompts.max_chars(100)]], prompts.max_items(8)]


class UpdateProposal(msgspec.Struct, frozen=True, kw_only=True):
    """The updater agent's answer: a strategy, the modifications, and which memories it consulted.

    The schema the agent is asked for is made per call (`proposal_type`): it names the rubrics it may change and
    the memories it may cite, and bounds its lengths."""

    strategy: Strategy
    rationale: Annotated[str, prompts.max_chars(600)]
    modifications: list[RubricModification] = []
    consulted: list[str] = []  # memory ids from the dynamic memory


@lru_cache(maxsize=64)
def proposal_type(
    adaptive_ids: tuple[str, ...], memory_ids: tuple[str, ...], meta_classes: tuple[str, ...] = HEALTHBENCH_AXES
) -> type[UpdateProposal]:
    """The updater's answer type for one call: a modification's `rubric_id` (modify, remove, reweight) is one of
    the set's adaptive rubrics (anchors never change), a rubric's `meta_class` one of the declared classes,
    `consulted` lists only the memories it was shown, and texts and lists are bounded. So an endpoint that
    enforces the schema cannot let a model target an anchor or an invented rubric or class. `validate` still
    checks every rule: other endpoints only see the schema."""
    rubric = msgspec.defstruct(
        "Rubric",
        [
            ("id", Annotated[str, prompts.max_chars(64)]),
            ("criterion", Annotated[str, prompts.max_chars(300)]),
            ("rationale", Annotated[str, prompts.max_chars(240)], ""),
            ("tags", Annotated[list[Annotated[str, prompts.max_chars(64)]], prompts.max_items(4)], []),
            ("meta_class", prompts.one_of(sorted(meta_classes)), meta_classes[0] if meta_classes else "accuracy"),
        ],
        bases=(Rubric,),
        frozen=True,
        kw_only=True,
    )
    target = prompts.one_of(sorted(adaptive_ids))
    modification = msgspec.defstruct(
        "RubricModification",
        [
            ("rationale", Annotated[str, prompts.max_chars(240)]),
            ("rubric_id", target | None, None),  # type: ignore[operator]
            ("rubric", rubric | None, None),
        ],
        bases=(RubricModification,),
        frozen=True,
        kw_only=True,
    )
    memory = prompts.one_of(sorted(memory_ids))
    return cast(
        type[UpdateProposal],
        msgspec.defstruct(
            "UpdateProposal",
            [
                ("modifications", Annotated[list[modification], prompts.max_items(4)], []),  # type: ignore[valid-type]
                ("consulted", Annotated[list[memory], prompts.max_items(8 if memory_ids else 0)], []),  # type: ignore[valid-type]
            ],
            bases=(UpdateProposal,),
            frozen=True,
            kw_only=True,
        ),
    )


# Configuration the domain needs, independent of pydantic.


@dataclass(frozen=True)
class Limits:
    min_points: float = -10.0
    max_points: float = 10.0
    max_adaptive: int = 12
    meta_classes: tuple[str, ...] = HEALTHBENCH_AXES  # the deployment's (settings.meta_classes)


@dataclass(frozen=True)
class MemoryBudget:
    static: bool = True
    dynamic: bool = True
    static_k: int = 3
    max_queries: int = 4
    adaptive_queries: bool = True
    results_per_query: int = 5


@dataclass(frozen=True)
class Prompts:
    query_writer: str
    updater: str

    @classmethod
    def load(cls, query_writer: Path | None = None, updater: Path | None = None) -> "Prompts":
        return cls(prompts.load(__package__, QUERY_WRITER, query_writer), prompts.load(__package__, UPDATER, updater))


# Validation (pure).


class Rejection(msgspec.Struct, frozen=True, kw_only=True):
    """A proposed modification that was dropped, and why."""

    action: str
    rubric_id: str | None
    reason: str


@dataclass(frozen=True)
class Validated:
    rubrics: list[Rubric]  # the set after the accepted modifications
    accepted: list[RubricModification]  # normalized: rubric_id always set, generated ids filled in
    rejected: list[Rejection]


def validate(current: list[Rubric], modifications: list[RubricModification], limits: Limits) -> Validated:
    """Apply the modifications that keep the rules, in order; drop each other one with a reason."""
    rubrics = list(current)
    accepted: list[RubricModification] = []
    rejected: list[Rejection] = []
    for mod in modifications:
        try:
            rubrics, applied = _apply_one(rubrics, mod, limits)
            accepted.append(applied)
        except _Invalid as e:
            rejected.append(
                Rejection(
                    action=str(mod.action),
                    rubric_id=mod.rubric_id or (mod.rubric.id if mod.rubric else None),
                    reason=str(e),
                )
            )
    return Validated(rubrics, accepted, rejected)


class _Invalid(Exception):
    pass


def _apply_one(
    rubrics: list[Rubric], mod: RubricModification, limits: Limits
) -> tuple[list[Rubric], RubricModification]:
    by_id = {r.id: r for r in rubrics}
    if mod.action is Action.ADD:
        new = _checked_rubric(mod, limits)
        given = new.id or mod.rubric_id or ""
        if given and given in by_id:
            raise _Invalid(f"cannot add {given!r}: a rubric with that id exists")
        if sum(r.kind is RubricKind.ADAPTIVE for r in rubrics) >= limits.max_adaptive:
            raise _Invalid(f"cannot add: the set already holds max_adaptive={limits.max_adaptive} adaptive rubrics")
        new = msgspec.structs.replace(new, id=given or new_id(new.criterion, by_id))
        return [*rubrics, new], msgspec.structs.replace(mod, rubric_id=new.id, rubric=new, points=None)
    rubric_id = mod.rubric_id or (mod.rubric.id if mod.rubric else None)
    target = by_id.get(rubric_id or "")
    if target is None:
        raise _Invalid(f"cannot {mod.action} {rubric_id!r}: no such rubric")
    if target.kind is RubricKind.ANCHOR:
        raise _Invalid(f"cannot {mod.action} {rubric_id!r}: anchors never change")
    if mod.action is Action.REMOVE:
        return [r for r in rubrics if r.id != rubric_id], msgspec.structs.replace(
            mod, rubric_id=rubric_id, rubric=None, points=None
        )
    if mod.action is Action.REWEIGHT:
        if mod.points is None:
            raise _Invalid(f"cannot reweight {rubric_id!r}: no points given")
        _check_points(mod.points, limits)
        new = msgspec.structs.replace(target, points=mod.points, rationale=mod.rationale)
    else:  # modify
        new = msgspec.structs.replace(_checked_rubric(mod, limits), id=target.id)
    return [new if r.id == rubric_id else r for r in rubrics], msgspec.structs.replace(
        mod, rubric_id=rubric_id, rubric=new if mod.action is Action.MODIFY else None
    )


def _checked_rubric(mod: RubricModification, limits: Limits) -> Rubric:
    if mod.rubric is None:
        raise _Invalid(f"cannot {mod.action}: no rubric given")
    if mod.rubric.kind is RubricKind.ANCHOR:
        raise _Invalid(f"cannot {mod.action} an anchor: anchors come only from the seed")
    if not mod.rubric.criterion.strip():
        raise _Invalid(f"cannot {mod.action}: empty criterion")
    if mod.rubric.meta_class not in limits.meta_classes:
        raise _Invalid(
            f"cannot {mod.action}: meta_class {mod.rubric.meta_class!r} is not declared {list(limits.meta_classes)}"
        )
    _check_points(mod.rubric.points, limits)
    return msgspec.structs.replace(
        mod.rubric, kind=RubricKind.ADAPTIVE, rationale=mod.rubric.rationale or mod.rationale
    )


def _check_points(points: float, limits: Limits) -> None:
    if not limits.min_points <= points <= limits.max_points or points == 0:
        raise _Invalid(f"points {points:g} outside [{limits.min_points:g}, {limits.max_points:g}] (or zero)")


# Prompts (pure).


class _Remembered(msgspec.Struct, frozen=True):
    id: str
    kind: str
    step: int
    text: str


def query_writer_messages(template: str, summary: StepSummary, budget: MemoryBudget) -> list[dict[str, str]]:
    how_many = (
        f"at most {budget.max_queries}, one per distinct issue"
        if budget.adaptive_queries
        else f"exactly {budget.max_queries}"
    )
    user = "\n".join(
        [
            prompts.block("query_budget", {"max_queries": budget.max_queries, "adaptive": budget.adaptive_queries}),
            f"Write {how_many} queries.",
            prompts.block("step_summary", msgspec.to_builtins(summary)),
        ]
    )
    return [{"role": "system", "content": template.rstrip()}, {"role": "user", "content": user}]


def updater_messages(
    template: str,
    summary: StepSummary,
    current: RubricSet,
    static: list[MemoryItem] | None,
    dynamic: list[Hit] | None,
    limits: Limits,
    prompt_chars: int | None = None,
) -> list[dict[str, str]]:
    """The updater's chat: instructions, then the data (rubrics, limits, summary, memories) as JSON blocks.

    A memory section that is switched off is left out entirely, so an ablation
    changes what the model sees and nothing else. With `prompt_chars` (the
    agent's prompt budget), the memories' texts are cut (prompts.fit) to what
    the rest leaves.
    """
    parts = [
        prompts.block("current_rubrics", [msgspec.to_builtins(r) for r in current.rubrics]),
        prompts.block(
            "limits",
            {
                "min_points": limits.min_points,
                "max_points": limits.max_points,
                "max_adaptive": limits.max_adaptive,
                "adaptive_now": sum(r.kind is RubricKind.ADAPTIVE for r in current.rubrics),
                "meta_classes": list(limits.meta_classes),
            },
        ),
        prompts.block("step_summary", msgspec.to_builtins(summary)),
    ]
    remembered = [_Remembered("", str(m.kind), m.step, m.text) for m in static or []]
    remembered += [_Remembered(h.id, str(h.item.kind), h.item.step, h.item.text) for h in dynamic or []]
    if prompt_chars is not None:
        rest = len(template) + sum(map(len, parts)) + len(prompts.as_data(remembered))
        texts = [r.text for r in remembered]
        texts = prompts.fit(texts, sum(map(prompts.size, texts)) - (rest - prompt_chars) - _FRAME_CHARS)
        remembered = [msgspec.structs.replace(r, text=t) for r, t in zip(remembered, texts)]
    if static is not None:
        parts.append(prompts.block("static_memory", remembered[: len(static)]))
    if dynamic is not None:
        parts.append(prompts.block("dynamic_memory", remembered[len(static or []) :]))
    return [{"role": "system", "content": template.rstrip()}, {"role": "user", "content": "\n".join(parts)}]


# Memory retrieval.


async def static_memory(
    memory: Memory, summary: StepSummary, instance_key: str | None, budget: MemoryBudget
) -> list[MemoryItem] | None:
    """The run's last K step summaries before this step (None when switched off)."""
    if not budget.static:
        return None
    items = await memory.recent(
        summary.run_id,
        MemoryKind.STEP_SUMMARY,
        limit=budget.static_k,
        instance_key=instance_key,
        before_step=summary.step,
    )
    return list(items)


async def dynamic_memory(
    memory: Memory, summary: StepSummary, ask: Ask, template: str, budget: MemoryBudget
) -> tuple[list[str], list[Hit] | None]:
    """(queries, deduplicated hits) from the query writer's searches (None when switched off)."""
    if not budget.dynamic:
        return [], None
    written = await ask(summary.run_id, QUERY_WRITER, query_writer_messages(template, summary, budget), MemoryQueries)
    queries = list(dict.fromkeys(q.strip() for q in written.queries if q.strip()))[: budget.max_queries]
    hits: dict[str, Hit] = {}
    for query in queries:
        for hit in await memory.search(summary.run_id, query, limit=budget.results_per_query, kinds=SEARCHED_KINDS):
            if hit.id not in hits or hit.score > hits[hit.id].score:
                hits[hit.id] = hit
    return queries, sorted(hits.values(), key=lambda h: -h.score)


# The update itself.


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


async def current_set(store: RubricStore, run_id: str, instance_key: str | None, seeds: Seeds) -> RubricSet:
    """The rubric set in force; a run without one is seeded, as the scorer would."""
    current = await store.current(run_id, instance_key)
    if current is None:
        current = await store.seed(
            RubricSet(run_id=run_id, instance_key=instance_key, version=1, rubrics=seeds.rubrics(instance_key))
        )
    return current


async def applied_for(store: RubricStore, summary: StepSummary, instance_key: str | None) -> RubricSet | None:
    """The version already made from this step, if any (a redelivered summary must not make another)."""
    for version in await store.history(summary.run_id, instance_key):
        if version.step == summary.step:
            return version
    return None


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
        done = await applied_for(self.store, summary, instance_key)
        if done is not None:
            return Outcome(EventKind.RUBRICS_REANNOUNCED, current, update=await self.recorded(done))
        static = await static_memory(self.memory, summary, instance_key, self.budget)
        queries, dynamic = await dynamic_memory(self.memory, summary, self.ask, self.prompts.query_writer, self.budget)
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
            modifications=diff(previous.rubrics if previous else [], done.rubrics),
            updated_at=done.created_at,
        )
        await self.memory.put(
            [memory_item(update, describe(update, "recorded after a restart; the proposal's rationale was lost"))]
        )
        return update


def memory_item(update: RubricsUpdated, text: str) -> MemoryItem:
    """The update as a memory (kind rubric_update, ref = its version)."""
    return MemoryItem(
        kind=MemoryKind.RUBRIC_UPDATE,
        run_id=update.run_id,
        step=update.step or 0,
        ref=str(update.version),
        instance_key=update.instance_key,
        text=text,
        message=wire.encode(update),
    )


class Conflict(Exception):
    """Another writer published a version first; the summary is retried (and then found applied)."""


def diff(before: list[Rubric], after: list[Rubric]) -> list[RubricModification]:
    """The modifications that turn `before` into `after` (for re-announcing a version)."""
    old, new = {r.id: r for r in before}, {r.id: r for r in after}
    out = [RubricModification(action=Action.REMOVE, rubric_id=i, rationale="") for i in old if i not in new]
    for i, r in new.items():
        if i not in old:
            out.append(RubricModification(action=Action.ADD, rubric_id=i, rubric=r, rationale=r.rationale))
        elif r != old[i]:
            only_points = msgspec.structs.replace(old[i], points=r.points, rationale=r.rationale) == r
            out.append(
                RubricModification(
                    action=Action.REWEIGHT if only_points else Action.MODIFY,
                    rubric_id=i,
                    rubric=None if only_points else r,
                    points=r.points if only_points else None,
                    rationale=r.rationale,
                )
            )
    return out


def describe(
    update: RubricsUpdated, rationale: str, consulted: Sequence[str] = (), rejected: Sequence[Rejection] = ()
) -> str:
    """The update as readable text (memory entry, logs)."""
    lines = [
        f"Rubric update to version {update.version} (from {update.previous_version}) after step {update.step}, "
        f"strategy {update.strategy}: {rationale}"
    ]
    for m in update.modifications:
        if m.action is Action.ADD and m.rubric:
            what = f"added {m.rubric.id} ({m.rubric.points:+g}, {m.rubric.meta_class}): {m.rubric.criterion}"
        elif m.action is Action.MODIFY and m.rubric:
            what = f"modified {m.rubric_id}: {m.rubric.criterion} ({m.rubric.points:+g})"
        elif m.action is Action.REWEIGHT:
            what = f"reweighted {m.rubric_id} to {m.points:+g}"
        else:
            what = f"removed {m.rubric_id}"
        lines.append(f"- {what}. Why: {m.rationale}")
    if rejected:
        lines.append("Dropped: " + "; ".join(f"{r.action} {r.rubric_id}: {r.reason}" for r in rejected))
    if consulted:
        lines.append("Memories consulted: " + ", ".join(consulted))
    return "\n".join(lines)
