"""What the scorer's commit writes besides the answering runtime's (runtime.answering): with the first score only,
the rollout handed to the analyzers (unless not analysed), the step's class statistics and rubric health (and its
step in the run's health index), its shadow score under a candidate rubric set (promotion gated: rubricd_services.state.promotion),
and, for the step's first score, its event on the canary-steps stream (the canaries start there, off the scoring
path); with every commit, a new verdict for the judge cache. What is written: docs/operators/recover.md, "Delivery".
"""

from rubricd.keys import Keys
from rubricd.messages import Rollout, Score
from rubricd_services.runtime import answering
from rubricd_services.runtime.answering import ScriptValues
from rubricd_services.state import health, promotion
from rubricd_services.state.canaries import STARTED
from rubricd_services.state.schedule import stats_increments

from .settings import ScorerSettings

# An optional key is '': `scored` (not analysed), `shadow` (no candidate in shadow, or a score that does not train),
# `canaries` (an evaluation rollout: it starts no canaries),
# `verdict` (no new verdict to keep for the judge cache).
SCRIPT = answering.script(
    keys="scored stats health health_steps shadow canaries canary_steps verdict",
    args="stats_ttl step shadow_field shadow canary_step verdict verdict_ttl",
    maps="stats health",
    with_first="""
  if k_scored ~= '' then append(k_scored, a_maxlen, a_kept) end
  hincrbyfloat(k_stats, m_stats)
  if #m_stats > 0 then redis.call('EXPIRE', k_stats, a_stats_ttl) end
  hincrby(k_health, m_health)
  if #m_health > 0 then
    redis.call('EXPIRE', k_health, a_stats_ttl)
    redis.call('ZADD', k_health_steps, now + a_stats_ttl, a_step)
    redis.call('ZREMRANGEBYSCORE', k_health_steps, '-inf', now)
    redis.call('EXPIRE', k_health_steps, a_stats_ttl)
  end
  if k_shadow ~= '' then
    redis.call('HSET', k_shadow, a_shadow_field, a_shadow)
    redis.call('EXPIRE', k_shadow, a_stats_ttl)
  end
  if k_canaries ~= '' and redis.call('HSETNX', k_canaries, a_canary_step, 1) == 1 then
    redis.call('EXPIRE', k_canaries, a_kept_ttl)
    append(k_canary_steps, a_maxlen, a_event)
  end
""",
    every_time="""
if k_verdict ~= '' then redis.call('SET', k_verdict, a_verdict, 'EX', a_verdict_ttl) end
""",
)


def values(
    keys: Keys, settings: ScorerSettings, rollout: Rollout, score: Score, verdict: tuple[str, bytes] | None = None
) -> ScriptValues:
    """The scorer's own effects of committing `score`: the rollout handed to the analyzers (the memory loop)
    unless it is an evaluation rollout not analysed; `verdict`, a new verdict's key and value, kept for
    `judge_cache_ttl_s` (the judge cache), whether or not the rollout had a score."""
    analyze = not rollout.evaluation or settings.analyze_evaluation
    canaries = "" if rollout.evaluation else keys.canary_marks(rollout.run_id)
    shadow = promotion.record(score)
    return ScriptValues(
        keys={
            "scored": keys.scored if analyze else "",
            "stats": keys.class_stats(rollout.run_id, rollout.step),
            "health": keys.rubric_health(rollout.run_id, rollout.step, score.instance_key),
            "health_steps": keys.rubric_health_steps(rollout.run_id, score.instance_key),
            "shadow": keys.shadow_scores(rollout.run_id, score.candidate.step, score.instance_key)
            if score.candidate and shadow
            else "",
            "canaries": canaries,
            "canary_steps": keys.canary_steps if canaries else "",
            "verdict": verdict[0] if verdict else "",
        },
        args={
            "stats_ttl": settings.schedule_stats_ttl_s,
            "step": rollout.step,
            "shadow_field": rollout.rollout_id,
            "shadow": shadow or "",
            "canary_step": f"{STARTED}{rollout.step}",
            "verdict": verdict[1] if verdict else "",
            "verdict_ttl": settings.judge_cache_ttl_s,
        },
        maps={"stats": stats_increments(score), "health": health.increments(score, rollout.group)},
    )
