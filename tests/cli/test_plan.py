"""`rubricd plan`: its arithmetic on round numbers, worked by hand, and the loads it refuses."""

import dataclasses
import json
import os

import pytest

from rubricd_services.analyzer.settings import AnalyzerSettings
from rubricd_services.cli.plan import DAY_S, MEASURED, Costs, Defaults, Load, plan
from rubricd_services.scorer.settings import ScorerSettings
from rubricd_services.summarizer.settings import SummarizerSettings
from tests import forks

ROUND = Costs(
    scorer_cpu_ms=10,
    analyzer_cpu_ms=100,
    summarizer_cpu_ms=1000,
    updater_cpu_ms=500,
    redis_cpu_ms=1,
    score_bytes=1000,
    verdict_bytes=500,
    event_bytes=100,
    analysis_bytes=1000,
    weaviate_object_bytes=10_000,
    judge_overhead_tokens=400,
    analyst_overhead_tokens=1000,
    summarizer_tokens_per_analysis=100,
    summarizer_overhead_tokens=500,
    updater_tokens=2000,
    busy=0.5,
)
SMALL = dataclasses.replace(
    Defaults.read(), answer_ttl_s=100, judge_cache_ttl_s=10, kept_maxlen=1000, kept_ttl_s=DAY_S, stream_maxlen=10
)


def test_a_plan_worked_by_hand():
    load = Load(
        rollouts_per_s=100,
        rollouts_per_step=400,
        judge_latency_s=3,
        group_size=8,
        group_judging=True,
        analysis_sample="extremes",  # 2 of 8: 25 analyses a second, 100 a step
        rollout_tokens=250,  # 1,000 bytes a rollout
        analyst_latency_s=4,
    )
    p = plan(load, ROUND, SMALL)
    # scorer: 100/s x 10 ms = 1 core, at half a core a process: 2; 300 judged at once / 256 a process: 2
    # analyzer: 25/s x 100 ms = 2.5 cores: 5; 100 at once / 32: 4. A step each 4 s: 0.25 and 0.125 of a core.
    assert p.cores == pytest.approx(
        {"scorer": 1.0, "analyzer": 2.5, "summarizer": 0.25, "updater": 0.125, "redis": 0.1}
    )
    assert p.replicas == {"scorer": 2, "analyzer": 5, "summarizer": 1, "updater": 1}
    # scores 100/s x 100 s x 1,000 B; verdicts 100 x 10 x 500; kept 1 run x 1,000 x (1,000 + 1,000);
    # streams 10 x (2 x 1,000 + 1,000 + 1,000 + 100)
    assert p.redis_gb == pytest.approx(
        {"scores": 0.01, "verdicts": 0.0005, "kept rollouts": 0.002, "streams": 0.000041, "total": 0.012541}
    )
    # a day: 21,600 steps, each 100 analyses + 5 chunks + a summary
    assert p.weaviate_objects == 21_600 * 106 and p.weaviate_gb == pytest.approx(21_600 * 106 * 10_000 / 1e9)
    assert p.tokens_per_hour == pytest.approx(
        {
            "judge": (100 / 8 * 400 + 100 * 250) * 3600,
            "analyst": 25 * (1000 + 250) * 3600,
            "summarizers": 0.25 * (500 + 100 * 100) * 3600,
            "updater": 0.25 * 2000 * 3600,
        }
    )
    assert p.limits == []


def test_each_process_costs_its_idle_share_beside_the_work():
    load = Load(rollouts_per_s=100, rollouts_per_step=400, judge_latency_s=0.1, analyst_latency_s=0.1)
    p = plan(load, dataclasses.replace(ROUND, idle_cores=0.1), SMALL)
    # scorer: 1 core of work, 0.4 of a process left beside its idle 0.1 (busy 0.5): 3 processes, 1.3 cores;
    # analyzer: 100/s x 100 ms = 10 cores: 25 processes, 12.5 cores; summarizer and updater: one each, + 0.1
    assert p.replicas == {"scorer": 3, "analyzer": 25, "summarizer": 1, "updater": 1}
    assert p.cores == pytest.approx(
        {"scorer": 1.3, "analyzer": 12.5, "summarizer": 0.35, "updater": 0.225, "redis": 0.1}
    )


def test_retention_bounds_the_memory_to_its_steps_and_the_summaries():
    load = Load(rollouts_per_s=100, rollouts_per_step=400, group_size=8, analysis_sample="extremes")
    kept = plan(Load(**{**load.__dict__, "retention_steps": 50}), ROUND, SMALL)
    assert kept.weaviate_objects == 50 * 105 + 21_600  # 50 steps' analyses and chunks; every step summary
    assert kept.weaviate_gb_per_day == pytest.approx(21_600 * 10_000 / 1e9)
    assert plan(load, ROUND, SMALL).weaviate_gb_per_day > 50 * kept.weaviate_gb_per_day


def test_many_runs_keep_their_own_rollouts_and_one_redis_stops_being_enough():
    one = plan(Load(rollouts_per_s=1_000_000 / DAY_S, rollouts_per_step=64))
    many = plan(Load(rollouts_per_s=1_000_000 / DAY_S, rollouts_per_step=64, runs=300))
    assert many.redis_gb["kept rollouts"] == pytest.approx(300 * one.redis_gb["kept rollouts"], rel=0.01)
    assert one.limits == [] and many.redis_gb["total"] > Defaults.read().redis_max_gb
    assert many.limits[0].startswith(f"Redis: {many.redis_gb['total']:.1f} GB is more than one Redis (25 GB)")
    assert MEASURED.busy == 0.7


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"rollouts_per_s": 0}, "--rollouts-per-day"),
        ({"rollouts_per_step": 0}, "--rollouts-per-step"),
        ({"group_size": 9}, "--group-size"),
        ({"analysis_sample": "3", "group_size": 2}, "--analysis-sample"),
        ({"judge_latency_s": 0}, "--judge-latency"),
        ({"runs": 0}, "--runs"),
        ({"retention_steps": -1}, "--retention-steps"),
    ],
)
def test_an_impossible_load_is_refused_naming_its_flag(change, named):
    with pytest.raises(ValueError, match=named):
        plan(Load(**{"rollouts_per_s": 1.0, "rollouts_per_step": 8, **change}))


def test_the_command_prints_the_plan_and_refuses_with_the_flag():
    done = forks.run("plan", "--rollouts-per-day", "864000", "--rollouts-per-step", "400", "--json", env=os.environ)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["load"]["rollouts_per_s"] == 10 and got["replicas"]["scorer"] == 1
    refused = forks.run(
        "plan", "--rollouts-per-second", "5", "--rollouts-per-step", "4", "--group-size", "8", env=os.environ
    )
    assert refused.returncode == 1 and "--group-size: from 1 to --rollouts-per-step (4)" in refused.stderr


def test_the_plan_assumes_the_services_own_defaults_and_follows_a_changed_one(monkeypatch):
    """Never restated: the scorer keeps 20,000 rollouts a run for 7 days and verdicts a day (its settings), and a
    default changed in a service's settings changes the plan."""
    d = Defaults.read()
    scorer = ScorerSettings()
    assert (d.answer_ttl_s, d.judge_cache_ttl_s, d.kept_maxlen, d.kept_ttl_s, d.stream_maxlen, d.scorer_in_flight) == (
        scorer.answer_ttl_s,
        scorer.judge_cache_ttl_s,
        scorer.kept_maxlen,
        scorer.kept_ttl_s,
        scorer.stream_maxlen,
        scorer.max_in_flight,
    )
    assert (d.analyzer_in_flight, d.chunk_size) == (AnalyzerSettings().max_in_flight, SummarizerSettings().chunk_size)
    load = Load(rollouts_per_s=10, rollouts_per_step=400)
    before = plan(load, ROUND)
    assert before.redis_gb["kept rollouts"] == pytest.approx(scorer.kept_maxlen * (4000 + 1000) / 1e9)
    monkeypatch.setattr(ScorerSettings.model_fields["kept_maxlen"], "default", 2 * scorer.kept_maxlen)
    monkeypatch.setattr(ScorerSettings.model_fields["judge_cache_ttl_s"], "default", 60)
    after = plan(load, ROUND)
    assert after.redis_gb["kept rollouts"] == pytest.approx(2 * before.redis_gb["kept rollouts"])
    assert after.redis_gb["verdicts"] == pytest.approx(10 * 60 * ROUND.verdict_bytes / 1e9)
