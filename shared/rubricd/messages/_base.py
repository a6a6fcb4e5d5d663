"""Field types shared by every message family."""

from typing import Annotated

import msgspec

# Ids end up inside Redis keys and Weaviate filters, so they are restricted to a
# safe alphabet: no spaces, no key separators beyond '.', '-', '_', '/'. The
# `(?!\n)` before `$` matters: in Python (msgspec) `$` also matches before a
# trailing newline; the lookahead keeps the schema valid JSON Schema (ECMA) too.
RunId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}(?!\n)$")]
RolloutId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_./-]{1,200}(?!\n)$")]
InstanceKey = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,128}(?!\n)$")]
GroupId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_./-]{1,200}(?!\n)$")]
# Steps and counts are bounded so every one stays exact and filterable wherever it is stored
# (Redis scores, Weaviate int properties, JSON readers with 53-bit numbers).
MAX_STEP = 1_000_000_000
MAX_ROLLOUTS_PER_STEP = 1_000_000
MAX_GROUP = 1024  # responses of one sample group (Rollout.group_size)
MAX_VOTES = 9  # judge calls a verdict is the majority of (Rollout.judge_votes)
MAX_PARTS = 4096  # closures of one step (StepClosed.parts: a trainer's processes)
Step = Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]
RolloutCount = Annotated[int, msgspec.Meta(ge=0, le=MAX_ROLLOUTS_PER_STEP)]
Version = Annotated[int, msgspec.Meta(ge=0)]
Points = Annotated[float, msgspec.Meta(ge=-100, le=100)]
UnitInterval = Annotated[float, msgspec.Meta(ge=0, le=1)]


class Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every message: immutable, keyword-only, tagged by `type`.

    The tag lets one decoder read a stream that carries several message
    types; a publisher may omit it when the stream carries only one.
    """
