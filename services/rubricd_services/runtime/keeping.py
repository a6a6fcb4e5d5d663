"""What the services answering a waiting publisher (scorer, comparer, arm) keep, and for how long.

Their commit scripts store the answer for redelivery (`answer_ttl_s`), reply on a stream that expires when idle
(`reply_ttl_s`), keep the run's last requests with their answers (`kept_maxlen`, `kept_ttl_s`; 0: none) and cap
the streams they append to (`maxlen`): the same arguments, under the same names, in all three.
"""

import functools
from dataclasses import asdict, dataclass
from typing import Protocol


class Settings(Protocol):
    """The settings of a service answering a waiting publisher (settings: AnswerSettings, ServiceSettings)."""

    @property
    def answer_ttl_s(self) -> int: ...
    @property
    def reply_ttl_s(self) -> int: ...
    @property
    def kept_maxlen(self) -> int: ...
    @property
    def kept_ttl_s(self) -> int: ...
    @property
    def stream_maxlen(self) -> int: ...


@dataclass(frozen=True, kw_only=True)
class Keeping:
    answer_ttl_s: int
    reply_ttl_s: int
    kept_maxlen: int
    kept_ttl_s: int
    maxlen: int  # of the events and reply streams (stream_maxlen)

    @classmethod
    def of(cls, settings: Settings) -> "Keeping":
        return cls(
            answer_ttl_s=settings.answer_ttl_s,
            reply_ttl_s=settings.reply_ttl_s,
            kept_maxlen=settings.kept_maxlen,
            kept_ttl_s=settings.kept_ttl_s,
            maxlen=settings.stream_maxlen,
        )

    def kept(self, key: str) -> str:
        """The kept requests' key, or '' (none kept) for a commit script."""
        return key if self.kept_maxlen else ""

    @functools.cached_property
    def args(self) -> dict[str, int]:
        """The commit scripts' arguments: answer_ttl, reply_ttl, kept_maxlen, kept_ttl, maxlen (made once, not per
        commit: the scorer's reply path)."""
        return {name.removesuffix("_s"): value for name, value in asdict(self).items()}
