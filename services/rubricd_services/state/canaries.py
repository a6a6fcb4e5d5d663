"""The judge's canaries during training, as Redis holds them: what each step's canary items found.

The read side of what the scorers write (`Keys.canaries`: one `CanaryStep` per run and step): the type and how to
read it (`rubricd status`, the dashboard). The judging side is `rubricd_services.judges.evaluation.canaries`. What
canaries are and when `judge_drift` fires: docs/researchers/judges.md, "Canaries during training".
"""

from typing import cast

import msgspec
from redis.asyncio import Redis

from rubricd.keys import Keys

CLAIMED = b"claimed:"  # the prefix of a hash field that says which scorer judges a step's canaries
STARTED = "started:"  # the prefix of a hash field that says a step's canaries are due (set by the scorer's commit)


class CanaryStep(msgspec.Struct, frozen=True, kw_only=True):
    """One step's canaries: labelled items judged by the run's judge, and how far its verdicts agreed."""

    step: int
    rubric_version: int  # the run's rubric version in force when the step's first rollout was scored
    items: list[str]  # the labelled items judged (their ids)
    verdicts: int  # rubric verdicts compared with their labels
    agreed: int
    failures: int = 0  # items whose judge call gave no usable verdict
    agreement: float | None = None  # agreed / verdicts; None when no verdict came back
    kappa: float | None = None  # Cohen's kappa of the verdicts against the labels
    baseline: float | None = None  # the mean agreement of the run's first canary steps (None while there are fewer)
    drift: bool = False  # below the floor, or more than the margin below the baseline
    prompt_tokens: int = 0
    completion_tokens: int = 0
    judged_at: float = 0.0
    # Promotion gated: the same items judged again with the candidate in shadow's changed rubrics in the same calls
    # (the candidate proposed at `candidate_step`), and how far those verdicts on the labelled rubrics agreed.
    candidate_step: int | None = None
    candidate_verdicts: int = 0
    candidate_agreed: int = 0

    @property
    def candidate_agreement(self) -> float | None:
        """The share of the verdicts judged with the candidate that agreed with their labels."""
        return self.candidate_agreed / self.candidate_verdicts if self.candidate_verdicts else None


async def read(redis: Redis, keys: Keys, run_id: str) -> list[CanaryStep]:
    """Every canary step of the run, in step order."""
    return parse(cast(dict[bytes, bytes], await redis.hgetall(keys.canaries(run_id))))


async def steps(redis: Redis, keys: Keys, run_id: str, wanted: list[int]) -> list[CanaryStep]:
    """The run's canary steps among `wanted` (those recorded), in step order (one HMGET: the gate's read)."""
    raws = (
        cast(list[bytes | None], await redis.hmget(keys.canaries(run_id), [str(s) for s in wanted])) if wanted else []
    )
    return parse({str(s).encode(): raw for s, raw in zip(wanted, raws, strict=True) if raw is not None})


def parse(fields: dict[bytes, bytes]) -> list[CanaryStep]:
    """The canary steps of a run's hash, in step order (any other field left out: the `claimed:` and `started:`
    marks a hash of an older rubricd held)."""
    steps = [msgspec.json.decode(raw, type=CanaryStep) for name, raw in fields.items() if name.isdigit()]
    return sorted(steps, key=lambda c: c.step)


def drifting_since(steps: list[CanaryStep]) -> int | None:
    """The step the run's current drift began at (steps in order), or None when its latest step is not drifting."""
    since = None
    for c in steps:
        since = (since if since is not None else c.step) if c.drift else None
    return since
