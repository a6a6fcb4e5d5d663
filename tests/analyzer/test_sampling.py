"""The analysis sample's rule and choice (pure), and its setting."""

import subprocess
import sys
from itertools import permutations

import pytest
from pydantic import ValidationError

from rubricd_services.analyzer import sampling
from rubricd_services.analyzer.settings import AnalyzerSettings
from tests.factories import rollout


def test_a_rollout_s_own_rule_wins_over_the_analyzers_and_a_rollout_without_a_group_is_always_analyzed() -> None:
    assert sampling.rule(rollout(group="g", analysis_sample=2), "extremes") == 2
    assert sampling.rule(rollout(group="g"), "extremes") == "extremes"
    assert sampling.rule(rollout(group="g", analysis_sample="all"), "extremes") == "all"
    assert sampling.rule(rollout(analysis_sample="extremes"), "extremes") == "all"


def test_extremes_are_the_best_and_the_worst_whatever_order_the_group_arrived_in() -> None:
    rewards = {"a": 0.5, "b": 0.9, "c": 0.1, "d": 0.5}
    for order in permutations(rewards):
        assert sampling.extremes({k: rewards[k] for k in order}) == ["b", "c"]


def test_ties_go_by_rollout_id_and_a_rollout_without_a_reward_is_never_chosen() -> None:
    assert sampling.extremes({"a": 1.0, "b": 1.0, "c": 1.0}) == ["a", "c"]
    assert sampling.extremes({"a": None, "b": 0.2, "c": None}) == ["b"]  # one reward: one analysis
    assert sampling.extremes({"a": None, "b": None}) == []
    assert sampling.extremes({}) == []


def test_the_setting_takes_all_extremes_or_k_and_a_bad_value_stops_the_service_naming_it(monkeypatch) -> None:
    for value, parsed in (("all", "all"), ("extremes", "extremes"), ("3", 3)):
        monkeypatch.setenv("RUBRICD_ANALYSIS_SAMPLE", value)
        assert AnalyzerSettings().analysis_sample == parsed
    for bad in ("0", "best", "2000"):
        monkeypatch.setenv("RUBRICD_ANALYSIS_SAMPLE", bad)
        with pytest.raises(ValidationError, match="analysis_sample"):
            AnalyzerSettings()
    done = subprocess.run(
        [sys.executable, "-m", "rubricd_services.cli", "serve", "analyzer"],
        env={"RUBRICD_ANALYSIS_SAMPLE": "best", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        cwd="services",
    )
    assert done.returncode != 0 and "RUBRICD_ANALYSIS_SAMPLE" in done.stderr, done.stderr
