"""HealthBench's format, in and out: its examples as per-instance rubric sets, and its report of scores.

In: one example a line becomes the rubric set of instance `prompt_id`, each criterion an anchor whose
meta-class is its `axis:` tag; a bad line is refused with its number and field. An example's prompt is a
conversation (user and assistant turns, maybe a system one), read as trajectory turns, never flattened: a
completion answering it is the policy's turn after them (`answered`). Out: HealthBench's own scoring per
example, axis and tag, and the report's means.
The format and the scoring rules: docs/researchers/rubrics.md, "HealthBench in and out".
"""

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Annotated

import msgspec

from rubricd.messages import Rubric, RubricKind, Turn

AXIS = "axis:"
OVERALL = "overall_score"


class Criterion(msgspec.Struct, frozen=True, kw_only=True):
    criterion: str
    points: float
    tags: list[str] = []


Conversation = Annotated[list[Turn], msgspec.Meta(min_length=1)]  # HealthBench's prompt: the turns so far


class Example(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a HealthBench file (the fields rubricd reads)."""

    prompt_id: str
    prompt: Conversation
    rubrics: list[Criterion]
    example_tags: list[str] = []


def answered(prompt: Sequence[Turn], completion: str) -> list[Turn]:
    """A conversation and a completion answering it, as a rollout's trajectory: the conversation's turns are the
    prompt turns (`prompt_turns=len(prompt)`), the completion the assistant turn after them."""
    return [*prompt, Turn(role="assistant", content=completion)]


class Invalid(ValueError):
    """A HealthBench file that cannot be read; the message names the line and the field."""


_PROMPT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,120}$")  # an instance key, with room for `-<index>` in rubric ids
_TYPES = {"float": "a number", "int": "an integer", "str": "a string", "array": "a list", "object": "an object"}


def is_healthbench(data: bytes) -> bool:
    """Whether a rubric file holds HealthBench lines, not the {instance key: [rubric, ...]} object: a file that
    is one JSON object is HealthBench's if it has a `prompt_id` (a one-example file); one that is not (several
    lines, or a bad one) is HealthBench's if its first line is a whole object, `{...}`, even a malformed one, so
    that its error names the line."""
    try:
        whole = msgspec.json.decode(data)
    except msgspec.DecodeError:
        first = data.lstrip().split(b"\n", 1)[0].strip()
        return first.startswith(b"{") and first.endswith(b"}")
    return isinstance(whole, dict) and "prompt_id" in whole


def read(data: bytes, meta_classes: Sequence[str] | None = None) -> dict[str, list[Rubric]]:
    """The rubric set of every example, by prompt_id; with `meta_classes`, every axis must be one of them."""
    sets: dict[str, list[Rubric]] = {}
    for number, example in examples(data):
        try:
            sets[example.prompt_id] = rubrics(example, meta_classes)
        except Invalid as e:
            raise Invalid(f"line {number}: {e}") from None
    return sets


def example_tags(data: bytes) -> dict[str, list[str]]:
    """Every example's `example_tags`, by prompt_id."""
    return {example.prompt_id: example.example_tags for _, example in examples(data)}


def examples(data: bytes) -> Iterator[tuple[int, Example]]:
    """(line number, example) of each line; Invalid names the first bad line, or a prompt_id seen before."""
    seen_at: dict[str, int] = {}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            example = msgspec.json.decode(line, type=Example)
        except msgspec.ValidationError as e:
            raise Invalid(f"line {number}: {_readable(e)}") from None
        except msgspec.DecodeError as e:
            raise Invalid(f"line {number}: not a JSON object: {e}") from None
        if example.prompt_id in seen_at:
            raise Invalid(
                f"line {number}: prompt_id: {example.prompt_id!r} was already on line {seen_at[example.prompt_id]}"
            )
        seen_at[example.prompt_id] = number
        yield number, example
    if not seen_at:
        raise Invalid("no examples: the file holds no line")


def rubrics(example: Example, meta_classes: Sequence[str] | None = None) -> list[Rubric]:
    """One example's criteria as rubrics (see the module's docstring)."""
    if not _PROMPT_ID.fullmatch(example.prompt_id):
        raise Invalid(f"prompt_id: {example.prompt_id!r} is not an instance key (1-120 of A-Z a-z 0-9 _ . -)")
    if not example.rubrics:
        raise Invalid("rubrics: an example needs at least one criterion")
    out = []
    for i, c in enumerate(example.rubrics):
        where = f"rubrics[{i}]"
        if not c.criterion.strip():
            raise Invalid(f"{where}.criterion: empty")
        if not -100 <= c.points <= 100 or c.points == 0:
            raise Invalid(f"{where}.points: {c.points:g} is not a nonzero number in [-100, 100]")
        axes = [t.removeprefix(AXIS) for t in c.tags if t.startswith(AXIS)]
        if len(axes) != 1:
            raise Invalid(f"{where}.tags: expected one axis: tag, found {len(axes)}")
        if meta_classes is not None and axes[0] not in meta_classes:
            raise Invalid(f"{where}.tags: axis {axes[0]!r} is not a declared meta-class {list(meta_classes)}")
        out.append(
            Rubric(
                id=f"{example.prompt_id}-{i}",
                criterion=c.criterion,
                points=c.points,
                meta_class=axes[0],
                kind=RubricKind.ANCHOR,
                tags=[t for t in c.tags if not t.startswith(AXIS)],
            )
        )
    return out


def _readable(e: msgspec.ValidationError) -> str:
    """msgspec's "Expected `float`, got `str` - at `$.rubrics[1].points`" as "rubrics[1].points: expected a
    number, got a string"."""
    message, _, at = str(e).partition(" - at `$")
    at = at.rstrip("`").lstrip(".")
    if missing := re.fullmatch(r"Object missing required field `(.+)`", message):
        return f"{at + '.' if at else ''}{missing[1]}: missing"
    for name, words in _TYPES.items():
        message = message.replace(f"`{name}`", words)
    message = message.replace("`", "")
    message = message[:1].lower() + message[1:]
    return f"{at}: {message}" if at else message


# Scores, as HealthBench computes them.


def score(rubrics: Iterable[Rubric], met: Mapping[str, bool]) -> float | None:
    """HealthBench's score of `rubrics`: met points over positive points, not clipped; None without positive points."""
    chosen = list(rubrics)
    possible = sum(r.points for r in chosen if r.points > 0)
    if possible <= 0:
        return None
    return sum(r.points for r in chosen if met.get(r.id, False)) / possible


def tag_scores(rubrics: Sequence[Rubric], met: Mapping[str, bool]) -> dict[str, float | None]:
    """An example's score per tag, HealthBench's names: `axis:<meta-class>` and each kept tag (None: undefined)."""
    by_tag: dict[str, list[Rubric]] = {}
    for r in rubrics:
        for tag in dict.fromkeys([AXIS + r.meta_class, *r.tags]):
            by_tag.setdefault(tag, []).append(r)
    return {tag: score(rs, met) for tag, rs in sorted(by_tag.items())}


def clipped_mean(values: Iterable[float | None]) -> tuple[float | None, int]:
    """(mean of the defined values clipped to [0, 1], how many there were); (None, 0) when none is defined."""
    defined = [v for v in values if v is not None]
    if not defined:
        return None, 0
    return min(1.0, max(0.0, sum(defined) / len(defined))), len(defined)
