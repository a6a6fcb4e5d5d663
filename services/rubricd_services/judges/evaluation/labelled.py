"""Labelled verdicts in: rubricd's own JSONL, one rollout a line with its rubric set and, per rubric, whether it
is met; or HealthBench's meta-evaluation JSONL (one completion and criterion a line, with several graders'
labels), read as items whose label is the graders' majority. A line that cannot be read is refused with its
number and field. The formats: docs/researchers/judges.md.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from rubricd.messages import Rubric, RubricKind


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
    graders: dict[str, list[bool]] = {}  # per rubric id, each grader's label, where several graded it


T = TypeVar("T")


class Invalid(ValueError):
    """A labelled file that cannot be read; the message names the line and the field."""


_decoder = msgspec.json.Decoder(Item)


def read(path: Path) -> list[Item]:
    """Every item of a labelled file (either format, told by its first line), in order; raises Invalid at the
    first bad line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next((line for line in lines if line.strip()), "")
    if '"binary_labels"' in first:
        return meta_eval(lines, str(path))
    return list(items(lines, str(path)))


def decoded(lines: list[str], decoder: msgspec.json.Decoder[T], source: str) -> Iterator[tuple[int, T]]:
    """(line number, value) of every line that is not blank; raises Invalid, naming the line and field, at the
    first that does not decode."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = decoder.decode(line)
        except msgspec.ValidationError as e:
            raise Invalid(f"{source}:{number}: {e}") from None
        except msgspec.DecodeError as e:
            raise Invalid(f"{source}:{number}: not JSON: {e}") from None
        yield number, value


def items(lines: list[str], source: str = "<labelled>") -> Iterator[Item]:
    seen: set[str] = set()
    for number, item in decoded(lines, _decoder, source):
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


class MetaExample(msgspec.Struct, frozen=True, kw_only=True):
    """One line of HealthBench's meta-evaluation data (the fields rubricd reads)."""

    prompt_id: str
    completion_id: str
    prompt: list[dict[str, Any]]
    completion: str
    rubric: str
    binary_labels: list[bool]
    category: str = ""


_meta = msgspec.json.Decoder(MetaExample)


def meta_eval(lines: list[str], source: str = "<meta-eval>") -> list[Item]:
    """HealthBench meta-evaluation lines as items: one per completion, a rubric per criterion line (points 1, its
    meta-class the line's category), labelled by the graders' strict majority (a tie is not met, as HealthBench's
    committee counts it), every grader's label kept in `graders`."""
    grouped: dict[tuple[str, str], list[MetaExample]] = {}
    for number, example in decoded(lines, _meta, source):
        if not example.binary_labels:
            raise Invalid(f"{source}:{number}: `$.binary_labels`: no grader's label")
        grouped.setdefault((example.prompt_id, example.completion_id), []).append(example)
    found = []
    for (prompt_id, completion_id), lines_of in grouped.items():
        ids = [f"c{i}" for i in range(1, len(lines_of) + 1)]
        found.append(
            Item(
                id=f"{prompt_id}/{completion_id}",
                prompt=conversation(lines_of[0].prompt),
                response=lines_of[0].completion,
                rubrics=[
                    Rubric(
                        id=i, criterion=e.rubric, points=1, meta_class=e.category or "accuracy", kind=RubricKind.ANCHOR
                    )
                    for i, e in zip(ids, lines_of)
                ],
                labels={i: sum(e.binary_labels) * 2 > len(e.binary_labels) for i, e in zip(ids, lines_of)},
                graders={i: list(e.binary_labels) for i, e in zip(ids, lines_of)},
            )
        )
    return found


def conversation(messages: list[dict[str, Any]]) -> str:
    """A conversation as the judge's prompt text: a single user turn as itself, more turns as `role: content`."""
    if len(messages) == 1:
        return str(messages[0].get("content", ""))
    return "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages)
