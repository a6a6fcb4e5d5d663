"""Labelled verdicts in: rubricd's own JSONL, one rollout a line (its text, or its trajectory) with its rubric set
and, per rubric, whether it is met (a turn rubric also turn by turn, where labelled); or HealthBench's
meta-evaluation JSONL (one completion and criterion a line, with several graders' labels), read as items whose
label is the graders' majority. A line that cannot be read is refused with its number and field. The formats:
docs/researchers/judges.md.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec

from rubricd.messages import GroupId, Rollout, Rubric, RubricKind
from rubricd.messages.trajectories import MAX_TURNS, Tools, Turns
from rubricd_services.judges import verdicts


class TurnLabels(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A turn rubric labelled turn by turn: the policy turns that meet its criterion and those that do not (the
    others it does not apply to), as the judge's turn verdict names them."""

    met_turns: list[int] = []
    unmet_turns: list[int] = []


class Item(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One labelled rollout: the judge reads `prompt`, `response` and `reference` against `rubrics`, or, for an
    agent, its `trajectory` with the `tools` offered and `prompt_turns` (as on the Rollout); `labels` says, per
    rubric id, whether the rubric is met (for a turn rubric, by the rule reward uses: verdicts.Decided);
    `turn_labels`, optionally, which policy turns meet a turn rubric; `note`: why, where a label is not
    obvious; `group`: its sample group (the items of a group share their prompt and rubrics; group judging judges
    them together)."""

    id: str
    prompt: str = ""
    response: str = ""
    reference: str | None = None
    trajectory: Turns = []
    tools: Tools = []
    prompt_turns: Annotated[int, msgspec.Meta(ge=0, le=MAX_TURNS)] = 0
    rubrics: list[Rubric]
    labels: dict[str, bool]
    turn_labels: dict[str, TurnLabels] = {}
    note: str = ""
    graders: dict[str, list[bool]] = {}  # per rubric id, each grader's label, where several graded it
    group: GroupId | None = None

    def rollout(self, run_id: str) -> Rollout:
        """The rollout the judge reads (raises ValueError, naming the turn and field, on a malformed trajectory)."""
        return Rollout(
            run_id=run_id,
            rollout_id="item",
            step=0,
            prompt=self.prompt,
            response=self.response,
            reference=self.reference,
            trajectory=self.trajectory,
            tools=self.tools,
            prompt_turns=self.prompt_turns,
        )


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
    groups: dict[str, tuple[int, Item]] = {}  # each group's first item, with its line
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
        if why := _unjudgeable(item) or _mislabelled(item):
            raise Invalid(f"{source}:{number}: {why}")
        if item.id in seen:
            raise Invalid(f"{source}:{number}: `$.id`: {item.id!r} repeats an earlier line's")
        seen.add(item.id)
        if item.group is not None:
            first_line, first = groups.setdefault(item.group, (number, item))
            if differs := _differs(first, item):
                raise Invalid(
                    f"{source}:{number}: `$.{differs}`: not the same as in line {first_line}, the first of group "
                    f"{item.group!r} (a group's items share their prompt and rubrics)"
                )
        yield item


def grouped(items: list[Item]) -> list[list[Item]]:
    """The items by sample group, in the order their groups first appear; an item without a group is one alone."""
    by_group: dict[str, list[Item]] = {}
    found: list[list[Item]] = []
    for item in items:
        if item.group is None:
            found.append([item])
        elif item.group in by_group:
            by_group[item.group].append(item)
        else:
            by_group[item.group] = [item]
            found.append(by_group[item.group])
    return found


def _differs(first: Item, item: Item) -> str | None:
    """The field in which `item` does not share its group's prompt (the text, or a trajectory's prompt turns and
    tools), reference or rubrics with the group's first item; None when it shares them all."""
    for name in ("prompt", "reference", "rubrics", "prompt_turns", "tools"):
        if getattr(item, name) != getattr(first, name):
            return name
    if item.trajectory[: item.prompt_turns] != first.trajectory[: first.prompt_turns]:
        return "trajectory"
    return None


def _unjudgeable(item: Item) -> str | None:
    """Why the judge cannot read `item` as a rollout (its turn and field named), or None."""
    if not (item.trajectory or item.response):
        return "`$.response`: no response, and no trajectory"
    try:
        rollout = item.rollout("labelled")
    except ValueError as e:
        return str(e)
    if item.trajectory and not rollout.policy_turns:
        return f"`$.prompt_turns`: no assistant turn after the first {item.prompt_turns}: nothing the policy wrote"
    return None


def _mislabelled(item: Item) -> str | None:
    """Why `item`'s turn labels cannot be read (a rubric that is not a turn rubric, a turn the policy did not
    write, a turn both ways), or disagree with its label by the rule reward uses; None when they are fine."""
    scopes = {r.id: r for r in item.rubrics}
    policy = set(item.rollout("labelled").policy_turns) if item.trajectory else set()
    for rubric_id, turns in item.turn_labels.items():
        where = f"`$.turn_labels.{rubric_id}`"
        rubric = scopes.get(rubric_id)
        if rubric is None or rubric.scope != "turn" or not item.trajectory:
            return f"{where}: turn labels go with a turn rubric of a trajectory"
        if others := sorted(set(turns.met_turns + turns.unmet_turns) - policy):
            return f"{where}: turn(s) {others} are not the policy's ({sorted(policy)})"
        if both := sorted(set(turns.met_turns) & set(turns.unmet_turns)):
            return f"{where}: turn(s) {both} both met and unmet"
        if (met := _turns_met(rubric_id, rubric.points, turns, policy)) != item.labels[rubric_id]:
            return (
                f"`$.labels.{rubric_id}`: {str(item.labels[rubric_id]).lower()}, but its turn labels make it "
                f"{str(met).lower()} (a turn rubric is met where some turn meets it and, for positive points, none "
                "fails it)"
            )
    return None


def _turns_met(rubric_id: str, points: float, turns: TurnLabels, policy: set[int]) -> bool:
    """Whether turn labels make the rubric met, read as the scorer reads the judge's turn verdict."""
    answer = verdicts.verdict_type((rubric_id,), False, frozenset({rubric_id}))(
        r0=verdicts.BareTurnVerdict(met_turns=turns.met_turns, unmet_turns=turns.unmet_turns)
    )
    return verdicts.read(answer, (rubric_id,), {rubric_id: points}, policy)[rubric_id].met


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
