"""The generator's chat (pure): its instructions, then the limits, the anchors and the prompt as data."""

from collections.abc import Sequence

import msgspec

from rubricd.messages import Rubric
from rubricd_services.runtime import prompts

from .draft import RULES
from .sets import Prompted
from .validation import RubricLimits

_FRAME_CHARS = 200  # the data blocks' tags, keys and quoting around the prompt's texts


class _Prompt(msgspec.Struct, frozen=True, omit_defaults=True):
    prompt: str
    reference: str | None = None


def messages(
    template: str,
    prompted: Prompted,
    anchors: Sequence[Rubric],
    meta_classes: Sequence[str],
    max_rubrics: int,
    prompt_chars: int | None = None,
    max_points: float = RubricLimits.max_points,
) -> list[dict[str, str]]:
    """The generator's chat: instructions, then the limits, the anchors already in the set and the prompt (with
    its reference, if any) as data; with `prompt_chars` (the agent's prompt budget) the prompt's texts are cut to
    fit (prompts.fit: a marker says where)."""
    parts = [
        prompts.block(
            "limits",
            {
                "max_rubrics": max_rubrics,
                "min_points": -max_points,
                "max_points": max_points,
                "meta_classes": list(meta_classes),
                "rules": list(RULES),
            },
        ),
        prompts.block("anchors", [{"criterion": r.criterion, "points": r.points} for r in anchors]),
    ]
    texts = [prompted.prompt, prompted.reference or ""]
    if prompt_chars is not None:
        budget = prompt_chars - len(template) - sum(map(len, parts)) - _FRAME_CHARS
        texts = prompts.fit(texts, max(budget, _FRAME_CHARS))
    parts.append(prompts.block("prompt", _Prompt(texts[0], texts[1] or None)))
    return [{"role": "system", "content": template.rstrip()}, {"role": "user", "content": "\n".join(parts)}]
