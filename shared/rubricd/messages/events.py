"""What every service reports: events to tail, and dead letters."""

import enum

from ._base import Message


class EventKind(enum.StrEnum):
    """Every kind of event a service reports, by the service that reports it.

    `Event.kind` stays a plain string on the wire, so a reader of an older or
    newer stream still decodes kinds it does not know.
    """

    # every service
    SERVICE_STARTED = "service_started"  # its subscribers are reading
    DEAD_LETTERED = "dead_lettered"  # an entry went to the dead letters (detail: why)
    # scorer
    ROLLOUT_SCORED = "rollout_scored"
    JUDGE_FAILED = "judge_failed"  # scored with status judge_failed: no reward
    RUBRICS_RELOADED = "rubrics_reloaded"  # a scorer dropped its cached set for a newer version
    META_CLASS_SELECTED = "meta_class_selected"  # alternating rewards: a step's active meta-class was decided
    RUBRICS_GENERATED = "rubrics_generated"  # the generator wrote an instance's rubric set (once per instance)
    RUBRICS_GENERATION_FAILED = "rubrics_generation_failed"  # its rollouts get the seed rubrics; retried next step
    COMPARISON_JUDGED = "comparison_judged"  # a Preference (fields: winner, consistent, correct, gatekeeper)
    JUDGE_ACCURACY = "judge_accuracy"  # after a labelled comparison: the run's judge accuracy at its rubric version
    CANARIES_JUDGED = "canaries_judged"  # a step's canary items were judged (fields: agreement, baseline, ...)
    JUDGE_DRIFT = "judge_drift"  # canary agreement fell below the floor or the baseline's margin (detail: which)
    # arm (Rubric-ARM training)
    ARM_REWARDED = "arm_rewarded"  # a generator or judge rollout was rewarded (fields: phase, reward, penalty)
    ARM_PHASE = "arm_phase"  # a run's Rubric-ARM phase switched at this step (fields: training, previous)
    # analyzer
    ROLLOUT_ANALYZED = "rollout_analyzed"
    # summarizer
    STEP_SUMMARIZED = "step_summarized"
    SUMMARY_FAILED = "summary_failed"  # retried after retry_after_s
    MEMORY_FORGOTTEN = "memory_forgotten"  # retention deleted a run's older memories (fields: before_step, per kind)
    # updater: what became of one step summary (one of these per summary)
    RUBRICS_UPDATED = "rubrics_updated"  # a new version
    RUBRICS_UNCHANGED = "rubrics_unchanged"  # the proposal changed nothing (or nothing valid)
    RUBRICS_REANNOUNCED = "rubrics_reannounced"  # a redelivered summary: its version was made before
    UPDATE_SKIPPED = "update_skipped"  # not a step of update_frequency
    UPDATE_FAILED = "update_failed"  # the LLM failed; rubrics kept
    # promotion gated: a proposal is a candidate in shadow, then promoted (in whole or part) or rejected
    RUBRICS_PROPOSED = "rubrics_proposed"  # a candidate, judged in shadow until its step `until`
    RUBRICS_IN_SHADOW = "rubrics_in_shadow"  # a candidate is in shadow: no proposal at this step
    RUBRICS_PROMOTED = "rubrics_promoted"  # the gate passed a candidate's modifications (all or some): a new version
    RUBRICS_REJECTED = "rubrics_rejected"  # the gate failed every modification (fields: the figures)
    # `rubricd dlq replay`
    DEAD_LETTER_REPLAYED = "dead_letter_replayed"  # a dead letter went back onto its stream


# Kinds renamed since: still accepted wherever a kind is given (`rubricd tail --kind`).
RENAMED_KINDS = {"rollout_analysed": EventKind.ROLLOUT_ANALYZED}

# What the updater reports for each step summary, one of these.
UPDATE_OUTCOMES = (
    EventKind.RUBRICS_UPDATED,
    EventKind.RUBRICS_UNCHANGED,
    EventKind.RUBRICS_REANNOUNCED,
    EventKind.UPDATE_SKIPPED,
    EventKind.UPDATE_FAILED,
    EventKind.RUBRICS_PROPOSED,
    EventKind.RUBRICS_IN_SHADOW,
    EventKind.RUBRICS_PROMOTED,
    EventKind.RUBRICS_REJECTED,
)


class Event(Message, tag="event", frozen=True, kw_only=True):
    """Something a service did, for `tail` and debugging. Never holds secrets."""

    service: str
    kind: str  # an EventKind
    run_id: str | None = None
    step: int | None = None
    rollout_id: str | None = None
    detail: str = ""
    fields: dict[str, str | int | float | bool | None] = {}
    at: float


class DeadLetter(Message, tag="dead_letter", frozen=True, kw_only=True):
    """A message a service gave up on, kept whole with the reason.

    `payload` is the entry's raw body (base64 in JSON), so nothing is lost and
    a fixed copy can be replayed onto `stream`; a body larger than the
    service's `dead_letter_max_bytes` is kept cut to that size, with its full
    size in `payload_size`. `reason` is at most 2000 characters.
    """

    stream: str
    entry_id: str
    group: str
    service: str
    reason: str
    deliveries: int
    payload: bytes
    at: float
    payload_size: int | None = None  # the entry's size in bytes when `payload` holds only its start
