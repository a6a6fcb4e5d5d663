"""The judge call: the prompt a rollout is graded with, and the verdict it expects.

The stable part (instructions and the rubric list) comes first, in the system
message, so providers can cache the prefix across rollouts of one rubric
version. The rollout follows as JSON data with `<` escaped, so nothing in it can
close the data block or pose as an instruction.
"""

from pathlib import Path

import msgspec

from common import prompts
from rubricd.messages import Rollout, Rubric, RubricSet

JUDGE = "judge"  # the agent: its settings are `agents.judge`, its prompt prompts/judge.md


class RubricVerdict(msgspec.Struct, frozen=True, kw_only=True):
    rubric_id: str
    explanation: str
    met: bool


class JudgeVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """What the judge returns: one verdict per rubric."""

    results: list[RubricVerdict]


class _RubricView(msgspec.Struct, frozen=True):
    id: str
    criterion: str
    points: float
    meta_class: str


class _RolloutView(msgspec.Struct, frozen=True, omit_defaults=True):
    prompt: str
    response: str
    reference: str | None = None


def load_template(path: Path | None = None) -> str:
    return prompts.load(__package__, JUDGE, path)


def system_message(template: str, rubric_set: RubricSet) -> str:
    """Instructions plus the rubric list: identical for every rollout of a version."""
    rubrics = [_RubricView(r.id, r.criterion, r.points, r.meta_class) for r in rubric_set.rubrics]
    return f"{template.rstrip()}\n{prompts.block('rubrics', rubrics)}\n"


def user_message(rollout: Rollout) -> str:
    view = _RolloutView(rollout.prompt, rollout.response, rollout.reference)
    return prompts.block("rollout", view)


def messages(system: str, rollout: Rollout) -> list[dict[str, str]]:
    """The chat messages for one judge call; `system` comes from system_message()."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user_message(rollout)}]


def met_by_id(verdict: JudgeVerdict, rubrics: list[Rubric]) -> dict[str, bool]:
    """Verdicts keyed by rubric id; ids the judge skipped or invented are ignored."""
    known = {r.id for r in rubrics}
    return {v.rubric_id: v.met for v in verdict.results if v.rubric_id in known}
