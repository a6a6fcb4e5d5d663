"""How a text rollout is shown to the judge: the prompt it is graded with.

The stable part (instructions and the rubric list) comes first, in the system
message, so providers can cache the prefix across rollouts of one rubric
version. The rollout follows as JSON data with `<` escaped, so nothing in it can
close the data block or pose as an instruction.
"""

import msgspec

from rubricd.messages import Rollout, RubricSet, Scope
from rubricd_services.runtime import prompts

_FRAME_CHARS = 100  # the data block's tags, keys and quoting around the rollout's texts


class RubricView(msgspec.Struct, frozen=True, omit_defaults=True):
    """A rubric as the judge reads it, a text rollout's and a trajectory's: a rubric's scope is shown only where it
    is not the whole trajectory (a trajectory's turn rubrics)."""

    id: str
    criterion: str
    points: float
    meta_class: str
    scope: Scope = "trajectory"


class _RolloutView(msgspec.Struct, frozen=True, omit_defaults=True):
    prompt: str
    response: str
    reference: str | None = None


def system_message(template: str, rubric_set: RubricSet, scoped: bool = False) -> str:
    """Instructions plus the rubric list (`scoped`: with each rubric's scope, for a trajectory): identical for every
    rollout of a version."""
    rubrics = [
        RubricView(r.id, r.criterion, r.points, r.meta_class, r.scope if scoped else "trajectory")
        for r in rubric_set.rubrics
    ]
    return f"{template.rstrip()}\n{prompts.block('rubrics', rubrics)}\n"


def user_message(rollout: Rollout, max_chars: int | None = None) -> str:
    """The rollout as data; with `max_chars`, its texts cut to fit (prompts.fit: a marker says where)."""
    texts = [rollout.prompt, rollout.response, rollout.reference or ""]
    prompt, response, reference = texts if max_chars is None else prompts.fit(texts, max_chars - _FRAME_CHARS)
    return prompts.block("rollout", _RolloutView(prompt, response, reference or None))


def rollout_chars(system: str, prompt_chars: int | None) -> int | None:
    """What is left of the agent's prompt budget (LLMSettings.prompt_chars) for the rollout beside `system`."""
    return None if prompt_chars is None else max(prompt_chars - len(system), _FRAME_CHARS * 2)


def messages(system: str, rollout: Rollout, max_chars: int | None = None) -> list[dict[str, str]]:
    """The chat messages for one judge call; `system` comes from system_message(), `max_chars` from
    rollout_chars()."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user_message(rollout, max_chars)}]
