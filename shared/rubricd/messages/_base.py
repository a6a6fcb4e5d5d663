"""Field types shared by every message family."""

from typing import Annotated

import msgspec

# Ids end up inside Redis keys and Weaviate filters, so they are restricted to a
# safe alphabet: no spaces, no key separators beyond '.', '-', '_', '/'.
RunId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")]
RolloutId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_./-]{1,200}$")]
InstanceKey = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,128}$")]
Step = Annotated[int, msgspec.Meta(ge=0)]
Version = Annotated[int, msgspec.Meta(ge=0)]
Points = Annotated[float, msgspec.Meta(ge=-100, le=100)]
UnitInterval = Annotated[float, msgspec.Meta(ge=0, le=1)]


class Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every message: immutable, keyword-only, tagged by `type`.

    The tag lets one decoder read a stream that carries several message
    types; a publisher may omit it when the stream carries only one.
    """
