"""The suite's own timing report (tests/timing.py), on a small suite of its own run alone and on two workers."""

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "two-workers"])
def test_a_run_ends_with_its_slowest_tests_and_the_time_per_directory(pytester, monkeypatch, workers):
    pytester.makepyfile(
        **{
            "slow/test_slow.py": "import time\n\ndef test_sleeps():\n    time.sleep(0.5)\n\ndef test_returns():\n    pass\n",
            "quick/test_quick.py": "def test_returns():\n    pass\n",
        }
    )
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    report = pytester.path / "timings.json"
    result = pytester.runpytest_subprocess("-p", "tests.timing", "--timings-json", str(report), *workers)

    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    slowest = next(line for line in out.split("the 20 slowest tests")[1].splitlines() if "::" in line)
    assert slowest.endswith("slow/test_slow.py::test_sleeps") and float(slowest.split()[0]) >= 0.5, out
    table = out.split("per test directory")[1].split("slow fixture")[0].splitlines()
    directories = {line.split()[-1]: line.split() for line in table if line.split()[-1:] in (["slow"], ["quick"])}
    assert directories["slow"][0] == "2" and float(directories["slow"][1]) >= 0.5, out
    assert directories["quick"][0] == "1", out
    timings = json.loads(report.read_text())
    sleeps = timings["tests"]["slow/test_slow.py::test_sleeps"]
    assert sleeps["call"] >= 0.5 and {"setup", "teardown", "call_cpu", "call_busy"} <= set(sleeps)
    assert sleeps["call_cpu"] < 0.4  # it slept: its CPU is not its wall
    assert timings["workers"] == (2 if workers else 0) and timings["machine_busy_s"] >= 0
    assert timings["directories"]["slow"]["tests"] == 2
