"""How a sample group is shown to the judge: the prompt once, every response under a neutral label.

A group judge call decides every rubric for every response at once, so the judge applies each criterion to the
responses side by side and the instructions, rubrics and prompt are sent once for the group instead of once per
response. The responses are labelled A, B, ... in a shuffled order (`order`), so no response is always first:
position bias cancels over a run, and each Score records where its response stood. A trajectory's shared prompt
turns are shown once and each response's turns under its label, numbered as in its trajectory. What the judge
reads, and when to choose group judging: docs/researchers/groups.md.
"""

import random
import string
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import msgspec

from rubricd.messages import Rollout, RubricSet
from rubricd_services.runtime import prompts

from . import rollouts, trajectories, verdicts

GROUP = "judge-group"  # the judge's instructions for a group: prompts/judge-group.md
LABELS = string.ascii_uppercase  # a call judges at most 26 responses
MAX_MEMBERS = 8  # responses in one call by default (RUBRICD_JUDGE_GROUP_MEMBERS)
# What one rubric's verdict takes of the answer, in tokens: with its explanation ("one or two sentences") and its
# keys, or bare. A call's responses are as many as the judge's max_tokens holds verdicts for.
VERDICT_TOKENS = {True: 60, False: 10}
_FRAME_CHARS = 60  # the block's tags and the object's keys around the texts
_PER_RESPONSE_CHARS = 40  # a response's label and keys


class _ResponseView(msgspec.Struct, frozen=True, omit_defaults=True):
    label: str
    response: str | None = None
    turns: list[Any] | None = None  # a trajectory's: the turns after the prompt's, as trajectories shows them


class _GroupView(msgspec.Struct, frozen=True, omit_defaults=True):
    responses: list[_ResponseView]
    prompt: str | None = None
    prompt_turns: list[Any] | None = None
    tools: list[Any] | None = None
    reference: str | None = None


def system_message(template: str, rubric_set: RubricSet, trajectory: bool) -> str:
    """Instructions plus the rubric list as a single call lists it (with each rubric's scope for trajectories):
    the same for every group of a version."""
    return (trajectories if trajectory else rollouts).system_message(template, rubric_set)


def order(group: str, vote: int, size: int) -> list[int]:
    """The members' order in vote `vote` of `group`'s call: a shuffle seeded by the group (a retried call shows the
    same order), turned by one place a vote, so each vote shows every member at another position."""
    shown = list(range(size))
    random.Random(group).shuffle(shown)
    turn = vote % size if size else 0
    return shown[turn:] + shown[:turn]


def response_of(rollout: Rollout) -> bytes:
    """What of a member the judge grades, beside the group's prompt: two members with the same get the same
    verdicts, so a group's call shows it once."""
    return msgspec.json.encode([rollout.response, rollout.trajectory[rollout.prompt_turns :]])


def user_message(members: Sequence[Rollout], shown: Sequence[int], reasoning: bool = False) -> str:
    """The group as data: the prompt (a trajectory's prompt turns and tools) once, then `members[shown[0]]` as A,
    `members[shown[1]]` as B, ... (the members share their prompt: the first's is shown)."""
    first = members[0]
    if first.trajectory:
        shared = trajectories.transcript(first, reasoning)
        responses = []
        for label, i in zip(LABELS, shown, strict=False):
            member = members[i]
            turns = trajectories.transcript(member, reasoning).turns
            responses.append(_ResponseView(label, turns=[t for t in turns if t.turn >= member.prompt_turns]))
        prompt_turns = [t for t in shared.turns if t.turn < first.prompt_turns]
        view = _GroupView(responses, prompt_turns=prompt_turns, tools=shared.tools or None, reference=first.reference)
    else:
        responses = [
            _ResponseView(label, response=members[i].response) for label, i in zip(LABELS, shown, strict=False)
        ]
        view = _GroupView(responses, prompt=first.prompt, reference=first.reference)
    return prompts.block("group", view)


def messages(
    system: str, members: Sequence[Rollout], shown: Sequence[int], reasoning: bool = False
) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user_message(members, shown, reasoning)}]


def verdict_type(
    size: int, rubric_ids: tuple[str, ...], explain: bool = True, turn_ids: frozenset[str] = frozenset()
) -> type[msgspec.Struct]:
    """What the judge returns for a group of `size`: `{"A": <verdicts.verdict_type>, "B": ..., ...}`, every label
    required, no other."""
    return _verdict_type(size, rubric_ids, explain, turn_ids)


@lru_cache(maxsize=1024)
def _verdict_type(
    size: int, rubric_ids: tuple[str, ...], explain: bool, turn_ids: frozenset[str]
) -> type[msgspec.Struct]:
    each = verdicts.verdict_type(rubric_ids, explain, turn_ids)
    fields = [(label, each) for label in LABELS[:size]]
    return msgspec.defstruct("GroupVerdict", fields, forbid_unknown_fields=True, frozen=True, kw_only=True)


def read(
    verdict: msgspec.Struct,
    size: int,
    rubric_ids: tuple[str, ...],
    points: Mapping[str, float],
    policy_turns: Sequence[Collection[int]],
    shown: Sequence[int],
) -> list[dict[str, verdicts.Decided]]:
    """Each member's verdicts (in the members' order, not the order shown), read as verdicts.read reads one
    response's."""
    decided: list[dict[str, verdicts.Decided]] = [{} for _ in range(size)]
    for label, i in zip(LABELS, shown, strict=False):
        decided[i] = verdicts.read(getattr(verdict, label), rubric_ids, points, policy_turns[i])
    return decided


@dataclass(frozen=True)
class GroupCall:
    """How a set judges a group: its system message, the rubrics it decides, what of the judge's context window
    the responses may fill (None: no limit), at most `max_members` responses a call."""

    system: str
    ids: tuple[str, ...]
    turn_ids: frozenset[str]
    explain: bool
    rollout_chars: int | None
    max_members: int
    reasoning: bool = False

    def sub_groups(self, members: Sequence[Rollout]) -> list[list[int]]:
        """The members split into the calls that judge them: consecutive, each at most `max_members` and, with a
        budget, within it (the prompt counted once); a member too large for any group is a call of its own."""
        calls: list[list[int]] = []
        used = 0
        prompt = _chars(members[0], prompt=True) if members else 0
        for i, member in enumerate(members):
            size = _chars(member, prompt=False) + _PER_RESPONSE_CHARS
            full = calls and len(calls[-1]) >= self.max_members
            over = calls and self.rollout_chars is not None and used + size > self.rollout_chars
            if not calls or full or over:
                calls.append([])
                used = prompt + _FRAME_CHARS
            calls[-1].append(i)
            used += size
        return calls

    def verdict(self, size: int) -> type[msgspec.Struct]:
        return verdict_type(size, self.ids, self.explain, self.turn_ids)

    def messages(self, members: Sequence[Rollout], shown: Sequence[int]) -> list[dict[str, str]]:
        return messages(self.system, members, shown, self.reasoning)


def group_call(
    template: str,
    rubric_set: RubricSet,
    prompt_chars: int | None,
    explain: bool,
    max_members: int,
    trajectory: bool,
    reasoning: bool = False,
    answer_tokens: int | None = None,
) -> GroupCall:
    """How `rubric_set` judges a group: at most `max_members` responses a call, and no more than the judge's answer
    (`answer_tokens`, its max_tokens) holds the verdicts of (VERDICT_TOKENS each; one: each response alone)."""
    system = system_message(template, rubric_set, trajectory)
    ids = tuple(r.id for r in rubric_set.rubrics)
    turn_ids = frozenset(r.id for r in rubric_set.rubrics if r.scope == "turn") if trajectory else frozenset()
    budget = None if prompt_chars is None else max(prompt_chars - len(system), _FRAME_CHARS * 4)
    members = min(max_members, len(LABELS))
    if answer_tokens is not None:
        members = min(members, max(1, answer_tokens // (VERDICT_TOKENS[explain] * max(1, len(ids)))))
    return GroupCall(system, ids, turn_ids, explain, budget, members, reasoning)


def _chars(rollout: Rollout, *, prompt: bool) -> int:
    """What a member's prompt (`prompt`) or response takes in the group's block."""
    if rollout.trajectory:
        turns = rollout.trajectory[: rollout.prompt_turns] if prompt else rollout.trajectory[rollout.prompt_turns :]
        return len(msgspec.json.encode(turns)) + (len(msgspec.json.encode(rollout.tools)) if prompt else 0)
    return (
        prompts.size(rollout.prompt) + prompts.size(rollout.reference or "")
        if prompt
        else prompts.size(rollout.response)
    )
