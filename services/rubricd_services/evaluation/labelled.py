"""Labelled verdicts in: rubricd's own JSONL, one rollout a line with its rubric set and, per rubric, whether it
is met. A line that cannot be read is refused with its number and field. The format: docs/researchers/judges.md.
"""

from collections.abc import Iterator
from pathlib import Path

import msgspec

from rubricd.messages import Rubric


class Item(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One labelled rollout: the judge reads `prompt`, `response` and `reference` against `rubrics`; `labels`
    says, per rubric id, whether the rubric is met; `note`: why, where the label is not obvious."""

    id: str
    prompt: str
    response: str
    reference: str | None = None
    rubrics: list[Rubric]
    labels: dict[str, bool]
    note: str = ""


class Invalid(ValueError):
    """A labelled file that cannot be read; the message names the line and the field."""


_decoder = msgspec.json.Decoder(Item)


def read(path: Path) -> list[Item]:
    """Every item of a labelled JSONL file, in order; raises Invalid at the first bad line."""
    return list(items(path.read_text(encoding="utf-8").splitlines(), str(path)))


def items(lines: list[str], source: str = "<labelled>") -> Iterator[Item]:
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = _decoder.decode(line)
        except msgspec.ValidationError as e:
            raise Invalid(f"{source}:{number}: {e}") from None
        except msgspec.DecodeError as e:
            raise Invalid(f"{source}:{number}: not JSON: {e}") from None
        ids = [r.id for r in item.rubrics]
        if not ids:
            raise Invalid(f"{source}:{number}: `$.rubrics`: no rubric to judge")
        if len(set(ids)) != len(ids):
            raise Invalid(f"{source}:{number}: `$.rubrics`: rubric ids repeat: {ids}")
        if missing := [i for i in ids if i not in item.labels]:
            raise Invalid(f"{source}:{number}: `$.labels`: no label for rubric(s) {missing}")
        if unknown := [i for i in item.labels if i not in ids]:
            raise Invalid(f"{source}:{number}: `$.labels`: label(s) for no rubric: {unknown}")
        if item.id in seen:
            raise Invalid(f"{source}:{number}: `$.id`: {item.id!r} repeats an earlier line's")
        seen.add(item.id)
        yield item
