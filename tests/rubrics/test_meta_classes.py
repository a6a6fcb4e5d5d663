"""Meta-classes are declared (`meta_classes`, HealthBench's axes by default): a rubric file using another stops the
service at start, naming the setting, the file and the class."""

import json
import os
from pathlib import Path

import pytest

from rubricd.messages import HEALTHBENCH_AXES
from rubricd_services.scorer.settings import ScorerSettings
from rubricd_services.settings import ServiceSettings, load
from rubricd_services.updater.settings import UpdaterSettings
from tests import forks

SAMPLE = Path(__file__).parents[1] / "fixtures" / "healthbench_sample.jsonl"


def test_the_default_classes_are_healthbenchs_axes_and_the_builtin_seed_uses_them():
    assert (
        ServiceSettings().meta_classes
        == list(HEALTHBENCH_AXES)
        == [
            "accuracy",
            "completeness",
            "communication_quality",
            "context_awareness",
            "instruction_following",
        ]
    )
    assert load(ScorerSettings).seed_rubrics is None  # the built-in seed passes the check


def test_a_deployment_declares_its_own_classes(monkeypatch, tmp_path):
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps([{"id": "no_jargon", "criterion": "Uses jargon.", "points": -2, "meta_class": "style"}]))
    monkeypatch.setenv("RUBRICD_META_CLASSES", '["style", "accuracy"]')
    monkeypatch.setenv("RUBRICD_SEED_RUBRICS", str(seed))
    assert load(UpdaterSettings).meta_classes == ["style", "accuracy"]
    monkeypatch.setenv("RUBRICD_META_CLASSES", '["style", "style"]')
    with pytest.raises(SystemExit, match="RUBRICD_META_CLASSES: Value error, meta-classes repeat"):
        load(UpdaterSettings)


@pytest.mark.parametrize("settings", [ScorerSettings, UpdaterSettings])
def test_a_seed_rubric_of_an_undeclared_class_is_refused_naming_the_file(monkeypatch, tmp_path, settings):
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps([{"id": "safe", "criterion": "Refuses harm.", "points": 3, "meta_class": "safety"}]))
    monkeypatch.setenv("RUBRICD_SEED_RUBRICS", str(seed))
    with pytest.raises(SystemExit) as refused:
        load(settings)
    assert (
        f"RUBRICD_SEED_RUBRICS ({seed}): rubric 'safe': meta_class 'safety' is not one of RUBRICD_META_CLASSES"
        in str(refused.value)
    )
    monkeypatch.delenv("RUBRICD_SEED_RUBRICS")
    monkeypatch.setenv("RUBRICD_META_CLASSES", '["accuracy", "completeness"]')  # the built-in seed uses others
    with pytest.raises(SystemExit, match="built-in seed_rubrics.json.*'addresses_grader'.*'instruction_following'"):
        load(settings)


def test_an_instance_file_of_an_undeclared_class_is_refused_naming_the_file_and_instance(monkeypatch, tmp_path):
    instances = tmp_path / "instances.json"
    instances.write_text(
        json.dumps({"poem": [{"id": "rhymes", "criterion": "It rhymes.", "points": 2, "meta_class": "poetry"}]})
    )
    monkeypatch.setenv("RUBRICD_INSTANCE_RUBRICS", str(instances))
    with pytest.raises(
        SystemExit,
        match=f"RUBRICD_INSTANCE_RUBRICS \\({instances}\\): instance 'poem', rubric 'rhymes': meta_class 'poetry'",
    ):
        load(ScorerSettings)


def test_the_service_stops_at_start_on_a_healthbench_file_with_an_undeclared_axis_naming_the_line():
    # The sample's line 3 is the first with an instruction_following criterion.
    env = {
        **os.environ,
        "RUBRICD_INSTANCE_RUBRICS": str(SAMPLE),
        "RUBRICD_META_CLASSES": '["accuracy", "completeness", "communication_quality", "context_awareness"]',
    }
    for service in ("scorer", "updater"):
        done = forks.run("serve", service, env=env, timeout=60)
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert (
            f"RUBRICD_INSTANCE_RUBRICS ({SAMPLE}): line 3: rubrics[0].tags: axis 'instruction_following' is not a "
            "declared meta-class" in done.stderr
        ), done.stderr
