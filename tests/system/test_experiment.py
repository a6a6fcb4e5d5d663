"""`make experiment`'s two-step smoke (tests/bench/experiment.py): its own stack, the policy pre-trained briefly,
two conditions (the loop off, the loop with both memories) of two GRPO steps each through rubricd, Rubric-ARM's two
models for a judge step and a generator step (served to the arm service by name), and the report."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_the_experiment_runs_two_conditions_for_two_steps_and_reports_them(tmp_path, frameworks_python):
    out = tmp_path / "report"
    argv = ["--steps", "2", "--seeds", "0", "--conditions", "fixed,both,arm-alternating", "--pretrain-steps", "30"]
    argv += ["--arm-steps", "2", "--arm-phase-steps", "1", "--arm-pretrain-steps", "40", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, str(REPO / "tests/bench/experiment.py"), *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=840,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = {(r["condition"], r["seed"]): r for r in map(json.loads, (out / "steps.jsonl").read_text().splitlines())}
    assert set(runs) == {("fixed", 0), ("both", 0), ("arm-alternating", 0)}
    arm = runs.pop(("arm-alternating", 0))["steps"]
    assert [(s["step"], s["training"]) for s in arm] == [(0, "judge"), (1, "generator")]
    assert arm[0]["judge_reward"] is not None and arm[0]["generator_reward"] is None  # the judge's step
    assert arm[1]["generator_reward"] is not None and arm[1]["judge_reward"] is None
    for step in arm:  # the held-out pairs judged by the served judge, wherever the generator wrote a valid set
        assert 0 <= step["heldout_accuracy"] <= 1 and len(step["rubrics"]) == 4
        assert step["heldout_judged"] == 3 * sum(1 for r in step["rubrics"] if r)
    for run in runs.values():
        assert [s["step"] for s in run["steps"]] == [0, 1]
        for step in run["steps"]:
            assert sum(step["styles"].values()) == pytest.approx(1.0) and 0 <= step["accuracy"] <= 1
            assert step["judge_failed"] == 0 and step["rubric_version"] >= 1 and step["waited_s"] > 0
    assert [h["version"] for h in runs[("fixed", 0)]["history"]] == [1]  # no updater: the seed set all run
    assert len(runs[("both", 0)]["history"]) >= 1
    report = (out / "report.md").read_text()
    assert "the LLM simulator (a test tool" in report and "Times (s): stack up" in report
    assert "| fixed |" in report and "| both |" in report
    assert "| arm-alternating |" in report
    assert all((out / f"{name}.png").exists() for name in ("fixed", "both", "arm-alternating"))
