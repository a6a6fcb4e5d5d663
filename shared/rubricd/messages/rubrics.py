"""Rubrics, versioned rubric sets, and their updates.

Rubrics follow the HealthBench convention: a criterion with signed points
(negative = undesirable behaviour) and a meta-class tag (HealthBench's axis).
Anchors never change; adaptive rubrics are what the updater evolves.
"""

import enum
from collections.abc import Collection
from typing import Annotated, Literal

import msgspec

from ._base import InstanceKey, Message, Points, RunId, Step, Version

# HealthBench's five axes: the meta-classes a deployment declares unless it sets its own (`meta_classes`).
HEALTHBENCH_AXES = ("accuracy", "completeness", "communication_quality", "context_awareness", "instruction_following")


class RubricKind(enum.StrEnum):
    ANCHOR = "anchor"
    ADAPTIVE = "adaptive"


Scope = Literal["trajectory", "turn"]


class Rubric(msgspec.Struct, frozen=True, kw_only=True):
    """One criterion the judge checks.

    `scope`: what of a trajectory the criterion is about: the whole of it (the default), or each of the policy's
    turns, tool calls included ("Each tool call passes arguments the tool accepts"). A turn rubric's verdict
    names the turns that meet it and those that do not (the rest it does not apply to); on a text rollout,
    which has one turn, it is judged like any other.
    """

    id: str
    criterion: str
    points: Points
    meta_class: str = "accuracy"
    kind: RubricKind = RubricKind.ADAPTIVE
    rationale: str = ""
    tags: list[str] = []  # HealthBench's other tags (level:, cluster:, theme:, ...), kept for per-tag reports
    # Rubric-ARM/OpenRubrics: a hard rule is an explicit constraint of the prompt, a principle a general quality
    # criterion; set on the rubrics the generator writes (None: not classified).
    rule: Literal["hard_rule", "principle"] | None = None
    scope: Scope = "trajectory"


class GeneratedBy(msgspec.Struct, frozen=True, kw_only=True):
    """Who wrote a generated rubric set: the generator's model, the sha256 of its instructions (its prompt
    file's text, so a record names the prompt version), and when."""

    model: str
    prompt_sha256: str
    generated_at: float


class RubricSet(Message, tag="rubric_set", frozen=True, kw_only=True):
    """The rubrics of a run (and instance) at one version.

    `step` is the training step whose evidence produced this version (None for
    the seed set and a generated one). `generated_by` is set on a set the
    rubric generator wrote (scorer.generate); a version the updater makes from
    it does not carry it.
    """

    run_id: RunId
    version: Version
    rubrics: list[Rubric]
    instance_key: InstanceKey | None = None
    step: Step | None = None
    created_at: float | None = None
    generated_by: GeneratedBy | None = None


class Strategy(enum.StrEnum):
    MAINTENANCE = "maintenance"
    CORRECTIVE = "corrective"
    ADVANCEMENT = "advancement"


class Action(enum.StrEnum):
    ADD = "add"
    MODIFY = "modify"
    REMOVE = "remove"
    REWEIGHT = "reweight"


class RubricModification(msgspec.Struct, frozen=True, kw_only=True):
    """One change the updater proposes, with why."""

    action: Action
    rationale: str
    rubric_id: str | None = None  # for modify, remove, reweight
    rubric: Rubric | None = None  # for add and modify
    points: float | None = None  # for reweight


class RubricsUpdated(Message, tag="rubrics_updated", frozen=True, kw_only=True):
    """A new rubric set version is in place; scorers reload it."""

    run_id: RunId
    version: Version
    previous_version: Version
    instance_key: InstanceKey | None = None
    step: Step | None = None
    strategy: Strategy = Strategy.MAINTENANCE
    modifications: list[RubricModification] = []
    updated_at: float | None = None


Promotion = Literal["immediate", "gated"]


class PromotionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """How a run's rubric changes take effect (`rubricd rubrics promotion`; the updater's settings by default):
    `immediate`, the updater's version rewards the next rollouts; `gated`, it is a Candidate judged in shadow for
    `shadow_steps` steps, then promoted by the gate, or rejected. `honest_margin`: how far (reward, 0-1 under
    weighted_sum) a changed rubric may lower the mean reward of the rollouts analysed as honest;
    `interference_margin`: how far the judge's canaries may agree less with their labels when the candidate's
    rubrics share their calls."""

    promotion: Promotion = "immediate"
    shadow_steps: Annotated[int, msgspec.Meta(ge=1, le=100)] = 1
    honest_margin: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.05
    interference_margin: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0


class GateCheck(msgspec.Struct, frozen=True, kw_only=True):
    """The gate's figures on one modification of a candidate, from its shadow scores: `groups_with_spread` of
    `groups` held a response that met the changed rubric and one that did not (an added or modified rubric must
    have some); `flagged` rollouts analysed with the hacking the proposal answered, whose mean reward the change
    moves by `flagged_delta`, and `honest` rollouts analysed without hacking, moved by `honest_delta`: it must not
    move the flagged above the honest, nor the honest down by more than the margin. `reasons`: why it failed."""

    action: Action
    rubric_id: str
    passed: bool
    reasons: list[str] = []
    groups: int = 0
    groups_with_spread: int = 0
    flagged: int = 0
    flagged_delta: float | None = None
    honest: int = 0
    honest_delta: float | None = None


class Interference(msgspec.Struct, frozen=True, kw_only=True):
    """The judge's canaries of the shadow `steps`, each item judged with its own labelled rubrics alone and again
    with the candidate's changed rubrics in the same calls: the share of their `verdicts` that agree with the
    labels each way. It fails when `with_candidate` is below `agreement` by more than the interference margin."""

    steps: list[Step]
    verdicts: int
    agreement: float
    with_candidate: float
    passed: bool


class GateDecision(msgspec.Struct, frozen=True, kw_only=True):
    """What the gate decided at `step`: `promoted` (the passing modifications as `version`) or `rejected`; one
    check per modification, the shadow scores it read, the canaries' interference check (None: no canary was
    judged with the candidate), and the reason of a decision about the whole candidate."""

    outcome: Literal["promoted", "rejected"]
    step: Step
    version: Version | None = None
    checks: list[GateCheck] = []
    shadow_scores: int = 0
    flagged_delta: float | None = None  # the passing modifications together, on the flagged rollouts
    honest_delta: float | None = None  # and on the honest ones
    canaries: Interference | None = None
    reason: str = ""
    decided_at: float | None = None


class Candidate(Message, tag="candidate", frozen=True, kw_only=True):
    """A proposed rubric set in shadow (promotion `gated`): the rollouts of the steps after `step`, up to `until`,
    are judged under the set in force (`base_version`, their reward) and under the candidate's changed rubrics
    (Score.candidate); then the gate promotes the modifications that pass, or rejects. `hacking`: the hacking types
    the step's summary reported, the evidence the gate holds the change against. Anchors never enter one."""

    run_id: RunId
    instance_key: InstanceKey | None = None
    step: Step
    until: Step
    base_version: Version
    rubrics: RubricSet  # the set the candidate would make (version base_version + 1)
    strategy: Strategy = Strategy.MAINTENANCE
    rationale: str = ""
    modifications: list[RubricModification] = []
    hacking: list[str] = []
    honest_margin: float = 0.05
    interference_margin: float = 0.0
    proposed_at: float | None = None
    decision: GateDecision | None = None

    def changed(self) -> dict[str, str]:
        """The rubrics the shadow judges, by id: an added one under its own id, a modified one under `<id>~c`
        (its id is the current rubric's)."""
        return {
            m.rubric_id: m.rubric_id if m.action is Action.ADD else f"{m.rubric_id}~c"
            for m in self.modifications
            if m.action in (Action.ADD, Action.MODIFY) and m.rubric_id is not None
        }

    def shadows(self, beside: Collection[str] = ()) -> list[Rubric]:
        """The changed rubrics as the shadow judges them, after rubrics whose ids are `beside`: under their ids in
        `changed`, one of those taken there under it with another `~c` (a canary item's own rubrics)."""
        changed = self.changed()
        ids = {i: f"{i}~c" if i in beside else i for i in changed.values()}
        return [msgspec.structs.replace(r, id=ids[changed[r.id]]) for r in self.rubrics.rubrics if r.id in changed]
