"""A bad setting stops the scorer at start, naming the setting."""

import os
import subprocess

from tests import forks


def test_a_bad_setting_stops_the_scorer_with_its_name():
    env = {
        **os.environ,
        "RUBRICD_MAX_IN_FLIGHT": "0",
        "RUBRICD_REWARD_POLICY": "median",
        "RUBRICD_LLM__TIMEOUT_S": "soon",
        "RUBRICD_SHADOW_STEPS": "0",  # promotion's, read by the scorer too
    }
    done = forks.run("serve", "scorer", env=env, timeout=60)
    assert done.returncode != 0
    for name in ("RUBRICD_MAX_IN_FLIGHT", "RUBRICD_REWARD_POLICY", "RUBRICD_LLM__TIMEOUT_S", "RUBRICD_SHADOW_STEPS"):
        assert name in done.stderr, done.stderr
    assert "unknown reward policy 'median'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_seed_file_is_named():
    env = {**os.environ, "RUBRICD_SEED_RUBRICS": "/nonexistent/rubrics.json"}
    done = forks.run("serve", "scorer", env=env, timeout=60)
    assert done.returncode != 0 and "RUBRICD_SEED_RUBRICS" in done.stderr and "/nonexistent/rubrics.json" in done.stderr


def test_a_malformed_instance_rubrics_file_is_named(tmp_path):
    bad = tmp_path / "instances.json"
    bad.write_text('{"poem": [{"id": "rhymes", "points": "many"}]}')
    env = {**os.environ, "RUBRICD_INSTANCE_RUBRICS": str(bad)}
    for service in ("scorer", "updater"):
        done = forks.run("serve", service, env=env, timeout=60)
        assert done.returncode != 0 and "RUBRICD_INSTANCE_RUBRICS" in done.stderr and "Traceback" not in done.stderr, (
            done.stderr
        )


def test_a_canary_set_that_cannot_be_read_stops_the_scorer_naming_the_setting_and_the_line(tmp_path):
    """The settings check only that the set is a file; its items are read once, when the canaries start, and a
    bad one stops the scorer there."""

    def serve(**settings: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **settings}
        return forks.run("serve", "scorer", env=env, timeout=60)

    bad = tmp_path / "canaries.jsonl"
    bad.write_text('{"id": "a", "prompt": "p", "response": "r", "rubrics": [], "labels": {}}\n')
    done = serve(RUBRICD_CANARY_SET=str(bad))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "RUBRICD_CANARY_SET" in done.stderr and f"{bad}:1: `$.rubrics`: no rubric to judge" in done.stderr
    done = serve(RUBRICD_CANARY_SET=str(tmp_path / "missing.jsonl"), RUBRICD_CANARY_FLOOR="2")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "RUBRICD_CANARY_SET" in done.stderr and "missing.jsonl is not a file" in done.stderr
    assert "RUBRICD_CANARY_FLOOR" in done.stderr
