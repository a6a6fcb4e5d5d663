"""Rubrics, versioned rubric sets, and their updates.

Rubrics follow the HealthBench convention: a criterion with signed points
(negative = undesirable behaviour) and a meta-class tag (HealthBench's axis).
Anchors never change; adaptive rubrics are what the updater evolves.
"""

import enum
from typing import Literal

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
