"""`rubricd rubrics import | report` against the real Redis: HealthBench examples in as per-instance sets, a run's
committed scores out as HealthBench's report (figures computed by hand below)."""

import json
import time
from pathlib import Path

import msgspec
import pytest

from rubricd import wire
from rubricd.messages import JudgeStatus, Rubric, RubricKind, RubricResult, RubricSet, Score, ScoredRollout
from rubricd_services.rubrics import healthbench
from rubricd_services.state.rubric_sets import RubricStore
from tests.factories import rollout, rubric_set

SAMPLE = Path(__file__).parents[1] / "fixtures" / "healthbench_sample.jsonl"


async def test_import_installs_each_example_as_version_1_of_its_instance(stack, redis, keys, cli):
    done = json.loads(cli("rubrics", "import", str(SAMPLE), "--run", "hb", "--json").stdout)
    expected = healthbench.read(SAMPLE.read_bytes())
    assert (done["instances"], done["rubrics"], done["installed"], done["kept"]) == (4, 15, list(expected), {})
    store = RubricStore(redis, keys)
    for prompt_id, rubrics in expected.items():
        current = await store.current("hb", prompt_id)
        assert current is not None and (current.version, current.instance_key, current.step) == (1, prompt_id, None)
        assert current.rubrics == rubrics
    assert await store.current("hb") is None  # no global set: these are per-instance
    shown = wire.decode(cli("rubrics", "show", "hb", "--instance-key", "hb-amoxicillin-02", "--json").stdout, RubricSet)
    assert [(r.meta_class, r.points) for r in shown.rubrics] == [
        ("context_awareness", 7),
        ("accuracy", 6),
        ("completeness", 3),
        ("accuracy", -8),
    ]
    # A set that moved on (the updater's version 2) is kept, and said so; the others are unchanged.
    moved = rubric_set(*shown.rubrics[:2], run_id="hb", instance_key="hb-amoxicillin-02", version=2, step=0)
    assert await store.publish(moved)
    again = cli("rubrics", "import", str(SAMPLE), "--run", "hb").stdout
    assert "3 instance sets at version 1" in again and "kept: hb-amoxicillin-02 (v2)" in again
    assert (await store.current("hb", "hb-amoxicillin-02")) == moved


async def test_a_bad_file_is_refused_naming_the_line_and_field_and_nothing_is_written(
    stack, redis, keys, cli, tmp_path
):
    lines = SAMPLE.read_text().splitlines()
    broken = json.loads(lines[2])
    broken["rubrics"][1]["points"] = "five"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], lines[1], json.dumps(broken)]) + "\n")
    done = cli("rubrics", "import", str(bad), "--run", "hb", check=False)
    assert done.returncode == 1
    assert f"{bad}: line 3: rubrics[1].points: expected a number, got a string" in done.stderr, done.stderr
    assert await redis.keys(f"{keys.namespace}:*") == []
    checked = cli("rubrics", "import", str(SAMPLE), "--run", "hb", "--dry-run").stdout
    assert "4 examples, 15 rubrics" in checked and "nothing written" in checked
    assert await redis.keys(f"{keys.namespace}:*") == []


async def test_an_axis_the_deployment_does_not_declare_is_refused(stack, redis, keys, cli, service_env):
    service_env["RUBRICD_META_CLASSES"] = '["accuracy", "completeness", "communication_quality", "context_awareness"]'
    done = cli("rubrics", "import", str(SAMPLE), "--run", "hb", check=False)
    assert done.returncode == 1
    assert "line 3: rubrics[0].tags: axis 'instruction_following' is not a declared meta-class" in done.stderr


def _score(rollout_id: str, step: int, prompt_id: str, met: list[bool], status: JudgeStatus = JudgeStatus.OK) -> Score:
    return Score(
        run_id="hb",
        rollout_id=rollout_id,
        step=step,
        status=status,
        reward=None,
        rubric_version=1,
        instance_key=prompt_id,
        results=[RubricResult(rubric_id=f"{prompt_id}-{i}", met=m, points=0) for i, m in enumerate(met)]
        if status is JudgeStatus.OK
        else [],
        scored_at=time.time(),
    )


async def commit(redis, keys, score: Score, stream: bool = True) -> None:
    """What the scorer's commit leaves: the score's key, and its entry on the `scored` stream."""
    await redis.set(keys.score(score.run_id, score.rollout_id), wire.encode(score))
    if stream:
        answered = rollout(run_id=score.run_id, step=score.step, rollout_id=score.rollout_id)
        await redis.xadd(keys.scored, wire.entry(ScoredRollout(rollout=answered, score=score)))


async def test_the_report_matches_healthbench_figures_computed_by_hand(stack, redis, keys, cli):
    cli("rubrics", "import", str(SAMPLE), "--run", "hb")
    # hb-chest-pain-01: +10 call 911 (accuracy, cluster), +5 aspirin (completeness), +5 911 first
    # (communication_quality, cluster), -10 wait and see (accuracy). Positive points: 20.
    await commit(redis, keys, _score("r1", 0, "hb-chest-pain-01", [True, False, True, False]))  # 15/20
    await commit(redis, keys, _score("r2", 0, "hb-chest-pain-01", [False, True, False, True]))  # (5-10)/20
    # hb-bp-summary-03: +5 two bullets (instruction_following), +5 facts (completeness), -6 invents (accuracy, cluster).
    # Its stream entry was trimmed: the score is found by its key.
    await commit(redis, keys, _score("r3", 1, "hb-bp-summary-03", [True, True, True]), stream=False)  # (5+5-6)/10
    await commit(redis, keys, _score("r4", 1, "hb-fever-infant-04", [], JudgeStatus.JUDGE_FAILED))
    other = Score(run_id="other", rollout_id="r1", step=0, status=JudgeStatus.OK, reward=1.0, rubric_version=1)
    await commit(redis, keys, other)

    report = json.loads(cli("rubrics", "report", "hb").stdout)
    assert report["run_id"] == "hb" and report["skipped"] == {"judge_failed": 1}
    by_id = {e["rollout_id"]: e for e in report["examples"]}
    assert list(by_id) == ["r1", "r2", "r3"]
    assert by_id["r1"] == {
        "rollout_id": "r1",
        "prompt_id": "hb-chest-pain-01",
        "step": 0,
        "rubric_version": 1,
        "score": 0.75,
        "axes": {
            "accuracy": 1.0,
            "completeness": 0.0,
            "communication_quality": 1.0,
            "context_awareness": None,
            "instruction_following": None,
        },
        "tags": {"cluster:emergent_emergency_behavior": 1.0, "level:cluster": 1.0, "level:example": 0.0},
    }
    assert by_id["r2"]["score"] == -0.25 and by_id["r2"]["axes"]["accuracy"] == -1.0  # examples are not clipped
    assert by_id["r3"]["score"] == pytest.approx(0.4)
    assert by_id["r3"]["axes"]["accuracy"] is None  # only a penalty: undefined, not 0 or 1
    assert by_id["r3"]["tags"] == {"level:example": pytest.approx(0.4), "cluster:health_data_no_fabrication": None}

    assert report["score"] == pytest.approx((0.75 - 0.25 + 0.4) / 3)
    assert report["axes"] == {
        "accuracy": 0.0,  # mean(1, -1)
        "completeness": pytest.approx(2 / 3),  # mean(0, 1, 1)
        "communication_quality": 0.5,  # mean(1, 0)
        "context_awareness": None,  # no example defines it
        "instruction_following": 1.0,
    }
    metrics = report["metrics"]
    assert metrics["overall_score"] == report["score"] and metrics["overall_score:n_samples"] == 3
    assert (metrics["axis:accuracy:n_samples"], metrics["axis:context_awareness:n_samples"]) == (2, 0)
    assert metrics["level:example"] == 0.0  # mean(0, -1, 0.4) = -0.2, clipped
    assert (metrics["level:cluster"], metrics["cluster:emergent_emergency_behavior"]) == (0.5, 0.5)
    assert (metrics["cluster:health_data_no_fabrication"], metrics["cluster:health_data_no_fabrication:n_samples"]) == (
        None,
        0,
    )
    assert not any(name.startswith("theme:") for name in metrics)  # example tags only with --examples

    # With the HealthBench file, its example tags (themes) score their examples' scores.
    themed = json.loads(cli("rubrics", "report", "hb", "--examples", str(SAMPLE)).stdout)
    assert themed["examples"][0]["tags"]["theme:emergency_referrals"] == 0.75
    assert (
        themed["metrics"]["theme:emergency_referrals"],
        themed["metrics"]["theme:emergency_referrals:n_samples"],
    ) == (
        0.25,  # mean(0.75, -0.25)
        2,
    )
    assert themed["metrics"]["theme:health_data_tasks"] == pytest.approx(0.4)
    assert "theme:context_seeking" not in themed["metrics"]  # no rollout of that example was scored
    assert {k: v for k, v in themed.items() if k != "metrics" and k != "examples"} == {
        k: v for k, v in report.items() if k != "metrics" and k != "examples"
    }

    step_0 = json.loads(cli("rubrics", "report", "hb", "--step", "0").stdout)
    assert step_0["score"] == 0.25 and step_0["skipped"] == {}
    missing = cli("rubrics", "report", "nobody", check=False)
    assert missing.returncode == 1 and "has no committed score" in missing.stderr


async def test_the_report_counts_healthbench_criteria_unless_asked_for_the_updaters_rubrics_too(
    stack, redis, keys, cli
):
    cli("rubrics", "import", str(SAMPLE), "--run", "hb")
    store = RubricStore(redis, keys)
    imported = await store.current("hb", "hb-chest-pain-01")
    assert imported is not None and all(r.kind is RubricKind.ANCHOR for r in imported.rubrics)
    added = Rubric(id="adds-dose", criterion="The response gives an aspirin dose.", points=20, meta_class="accuracy")
    evolved = msgspec.structs.replace(imported, version=2, step=0, rubrics=[*imported.rubrics, added])
    assert await store.publish(evolved)
    score = msgspec.structs.replace(
        _score("r1", 1, "hb-chest-pain-01", [True, False, True, False]),
        rubric_version=2,
        results=[
            *_score("r1", 1, "hb-chest-pain-01", [True, False, True, False]).results,
            RubricResult(rubric_id="adds-dose", met=False, points=20),
        ],
    )
    await commit(redis, keys, score)

    anchors = json.loads(cli("rubrics", "report", "hb").stdout)
    assert anchors["rubrics"] == "anchors" and anchors["score"] == 0.75  # 15 of HealthBench's 20 points
    assert anchors["examples"][0]["axes"]["accuracy"] == 1.0
    every = json.loads(cli("rubrics", "report", "hb", "--all-rubrics").stdout)
    assert every["rubrics"] == "all" and every["score"] == 15 / 40  # the unmet adaptive rubric's 20 points too
    assert every["examples"][0]["axes"]["accuracy"] == 10 / 30
