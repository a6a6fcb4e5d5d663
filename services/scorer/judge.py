"""The judge call: the prompt a rollout is graded with, and the verdict it expects.

The stable part (instructions and the rubric list) comes first, in the system
message, so providers can cache the prefix across rollouts of one rubric
version. The rollout follows as JSON data with `<` escaped, so nothing in it can
close the data block or pose as an instruction.
"""

from importlib import resources
from pathlib import Path

import msgspec

from rubricd.messages import Rollout, Rubric, RubricSet


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


def default_template() -> str:
    return resources.files(__package__).joinpath("prompts/judge.md").read_text()


def load_template(path: Path | None) -> str:
    return path.read_text() if path else default_template()


def _as_data(obj: object) -> str:
    # `\u003c` is JSON for '<': the text can never contain a closing tag.
    return msgspec.json.encode(obj).decode().replace("<", "\\u003c")


def system_message(template: str, rubric_set: RubricSet) -> str:
    """Instructions plus the rubric list: identical for every rollout of a version."""
    rubrics = [_RubricView(r.id, r.criterion, r.points, r.meta_class) for r in rubric_set.rubrics]
    return f"{template.rstrip()}\n<rubrics>\n{_as_data(rubrics)}\n</rubrics>\n"


def user_message(rollout: Rollout) -> str:
    view = _RolloutView(rollout.prompt, rollout.response, rollout.reference)
    return f"<rollout>\n{_as_data(view)}\n</rollout>"


def messages(system: str, rollout: Rollout) -> list[dict[str, str]]:
    """The chat messages for one judge call; `system` comes from system_message()."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user_message(rollout)}]


def met_by_id(verdict: JudgeVerdict, rubrics: list[Rubric]) -> dict[str, bool]:
    """Verdicts keyed by rubric id; ids the judge skipped or invented are ignored."""
    known = {r.id for r in rubrics}
    return {v.rubric_id: v.met for v in verdict.results if v.rubric_id in known}
