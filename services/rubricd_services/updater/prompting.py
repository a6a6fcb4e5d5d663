"""The query writer's and the updater's chats (pure): instructions, then the data as JSON blocks."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from rubricd.messages import Candidate, RubricKind, RubricSet, StepSummary
from rubricd_services.memory.store import Hit, MemoryItem
from rubricd_services.runtime import prompts

from .proposal import Limits

# The agents: settings `agents.<name>`, prompts prompts/<name>.md.
QUERY_WRITER = "query_writer"  # turns a step summary into searches of the run's memory
UPDATER = "updater"  # proposes the rubric modifications
_FRAME_CHARS = 200  # the memory blocks' tags and newlines


@dataclass(frozen=True)
class MemoryBudget:
    """What the updater is shown of the run's memory: the paper's ablation switches and their budgets."""

    static: bool = True
    dynamic: bool = True
    static_k: int = 3
    max_queries: int = 4
    adaptive_queries: bool = True
    results_per_query: int = 5


@dataclass(frozen=True)
class Prompts:
    """The two agents' instructions: the files next to the service, or the configured ones."""

    query_writer: str
    updater: str

    @classmethod
    def load(cls, query_writer: Path | None = None, updater: Path | None = None) -> "Prompts":
        return cls(prompts.load(__package__, QUERY_WRITER, query_writer), prompts.load(__package__, UPDATER, updater))


class _Remembered(msgspec.Struct, frozen=True):
    id: str
    kind: str
    step: int
    text: str


class _Uninformative(msgspec.Struct, frozen=True):
    rubric_id: str
    met_rate: float
    rollouts: int
    groups: int


class Refused(msgspec.Struct, frozen=True):
    """A change the promotion gate refused (promotion gated), as the updater sees it."""

    proposed_after_step: int
    action: str
    rubric_id: str
    criterion: str | None
    points: float | None
    why: list[str]


def refused(candidates: Sequence[Candidate]) -> list[Refused]:
    """The changes of decided `candidates` that failed the gate, with its reasons."""
    out = []
    for c in candidates:
        by_id = {m.rubric_id: m for m in c.modifications}
        for check in c.decision.checks if c.decision else []:
            if check.passed:
                continue
            m = by_id.get(check.rubric_id)
            rubric = m.rubric if m else None
            points = rubric.points if rubric else (m.points if m else None)
            criterion = rubric.criterion if rubric else None
            out.append(Refused(c.step, str(check.action), check.rubric_id, criterion, points, check.reasons))
    return out


def _summary_view(summary: StepSummary) -> dict[str, object]:
    """The step summary as the agents see it: its rubric health is shown apart (`uninformative`)."""
    view = msgspec.to_builtins(summary)
    view.pop("health", None)
    return view


def uninformative(summary: StepSummary, current: RubricSet) -> list[_Uninformative]:
    """The adaptive rubrics of the set that the step's health reports uninformative (anchors never change)."""
    adaptive = {r.id for r in current.rubrics if r.kind is RubricKind.ADAPTIVE}
    return [
        _Uninformative(h.rubric_id, round(h.met_rate, 3), h.rollouts, h.groups)
        for h in summary.health
        if h.uninformative and h.rubric_id in adaptive
    ]


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
            prompts.block("step_summary", _summary_view(summary)),
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
    rejected: Sequence[Refused] = (),
) -> list[dict[str, str]]:
    """The updater's chat: instructions, then the data (rubrics, limits, summary, the adaptive rubrics the step's
    health found uninformative when it was counted, the changes the promotion gate refused lately, memories) as
    JSON blocks.

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
        prompts.block("step_summary", _summary_view(summary)),
    ]
    if summary.health:
        parts.append(prompts.block("uninformative_rubrics", uninformative(summary, current)))
    if rejected:
        parts.append(prompts.block("rejected_changes", list(rejected)))
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
