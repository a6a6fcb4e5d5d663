"""What the scorer answers (`answers`: a rollout, its Score, its event) and what its commit writes besides the
answering runtime's (common.answering): with the first score only, the rollout handed to the analyzers (unless
not analysed) and the step's class statistics and rubric health; with every commit, a new verdict for the judge
cache. What is written: docs/operators/recover.md, "Delivery".
"""

import time

from rubricd import health
from rubricd.keys import SCORERS, Keys
from rubricd.messages import Event, EventKind, JudgeStatus, Rollout, Score, ScoredRollout
from rubricd.reward import POLICIES
from rubricd_services.common import answering, events
from rubricd_services.common.answering import Answers, Effects
from rubricd_services.common.intake import Rejected, Sender

from .schedule import stats_increments
from .settings import ScorerSettings

SERVICE = "scorer"

# An optional key is '': `scored` (not analysed), `verdict` (no new verdict to keep for the judge cache).
SCRIPT = answering.script(
    keys="scored stats health verdict",
    args="stats_ttl verdict verdict_ttl",
    maps="stats health",
    with_first="""
  if k_scored ~= '' then append(k_scored, a_maxlen, a_kept) end
  hincrbyfloat(k_stats, m_stats)
  if #m_stats > 0 then redis.call('EXPIRE', k_stats, a_stats_ttl) end
  hincrby(k_health, m_health)
  if #m_health > 0 then redis.call('EXPIRE', k_health, a_stats_ttl) end
""",
    every_time="""
if k_verdict ~= '' then redis.call('SET', k_verdict, a_verdict, 'EX', a_verdict_ttl) end
""",
)


def answers(max_rollout_bytes: int) -> Answers[Rollout, Score]:
    return Answers(
        request=Rollout,
        id_field="rollout_id",
        what="rollout",
        done="scored",
        answer="score",
        max_bytes=("max_rollout_bytes", max_rollout_bytes),
        stream=lambda keys: keys.rollouts,
        consumer_group=SCORERS,
        stored=lambda keys, r: keys.score(r.run_id, r.rollout_id),
        kept=lambda keys, r: keys.kept_rollouts(r.run_id),
        keep=lambda r, score: ScoredRollout(rollout=r, score=score),
        event=event,
        rejected=rejected,
        script=SCRIPT,
        check=known_policy,
    )


def effects(
    keys: Keys, settings: ScorerSettings, rollout: Rollout, score: Score, verdict: tuple[str, bytes] | None = None
) -> Effects:
    """The scorer's own effects of committing `score`: the rollout handed to the analyzers (the memory loop)
    unless it is an evaluation rollout not analysed; `verdict`, a new verdict's key and value, kept for
    `judge_cache_ttl_s` (the judge cache), whether or not the rollout had a score."""
    analyze = not rollout.evaluation or settings.analyze_evaluation
    return Effects(
        keys={
            "scored": keys.scored if analyze else "",
            "stats": keys.class_stats(rollout.run_id, rollout.step),
            "health": keys.rubric_health(rollout.run_id, rollout.step, score.instance_key),
            "verdict": verdict[0] if verdict else "",
        },
        args={
            "stats_ttl": settings.schedule_stats_ttl_s,
            "verdict": verdict[1] if verdict else "",
            "verdict_ttl": settings.judge_cache_ttl_s,
        },
        maps={"stats": stats_increments(score), "health": health.increments(score, rollout.group)},
    )


def event(rollout: Rollout, score: Score) -> Event:
    kind = EventKind.ROLLOUT_SCORED if score.status is JudgeStatus.OK else EventKind(score.status)
    return events.event(
        SERVICE,
        kind,
        run_id=rollout.run_id,
        step=rollout.step,
        rollout_id=rollout.rollout_id,
        detail=score.error or "",
        reward=score.reward,
        rubric_version=score.rubric_version,
        judge_ms=score.judge_ms,
        **({"evaluation": True} if score.evaluation else {}),
    )


def rejected(sender: Sender, reason: str, rollout: Rollout | None = None) -> Score:
    """The answer to a rollout that can never be scored as sent (its ids are the sender's)."""
    return Score(
        run_id=sender.run_id,
        rollout_id=sender.id,
        step=sender.step,
        status=JudgeStatus.REJECTED,
        reward=None,
        rubric_version=0,
        error=reason,
        scored_at=time.time(),
    )


def known_policy(rollout: Rollout) -> None:
    if rollout.reward_policy is not None and rollout.reward_policy not in POLICIES:
        raise Rejected(f"unknown reward_policy {rollout.reward_policy!r}; known: {sorted(POLICIES)}")
