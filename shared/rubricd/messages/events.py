"""What every service reports: events to tail, and dead letters."""

import msgspec

from ._base import Message


class Event(Message, tag="event", kw_only=True):
    """Something a service did, for `tail` and debugging. Never holds secrets."""

    service: str
    kind: str  # e.g. rollout_scored, judge_failed, rubrics_reloaded, dead_lettered
    run_id: str | None = None
    step: int | None = None
    rollout_id: str | None = None
    detail: str = ""
    fields: dict[str, str | int | float | bool | None] = {}
    at: float


class DeadLetter(Message, tag="dead_letter", kw_only=True):
    """A message a service gave up on, kept whole with the reason.

    `payload` is the entry's raw body (base64 in JSON), so nothing is lost and
    a fixed copy can be replayed onto `stream`.
    """

    stream: str
    entry_id: str
    group: str
    service: str
    reason: str
    deliveries: int
    payload: bytes
    at: float
