"""Where the suite's time goes: a pytest plugin (tests/conftest.py loads it) that ends every run with its 20 slowest
tests, the time per test directory and how busy the machine was, and writes it all to .stack/artifacts/timings.json.

Each test's phases (setup, call, teardown) carry their wall, the CPU of the process that ran them and of the
children it reaped (services, CLIs, trainers' scripts), and the machine's busy CPU meanwhile (/proc/stat, so the
servers too); a setup also names its slow fixtures. Under xdist the workers measure and the controller reports.
"""

import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

REPORT = Path(__file__).resolve().parents[1] / ".stack" / "artifacts" / "timings.json"  # --timings-json's default
SLOWEST = 20
SLOW_FIXTURE_S = 0.5  # a fixture's setup is named on its test's report from this long on


def machine_busy() -> float:
    """Seconds of CPU every core of this machine has spent busy since boot (all but idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def process_cpu() -> float:
    """CPU seconds of this process and of the children it has reaped."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


PHASES = ("setup", "call", "teardown")


def phases(test: dict[str, Any], suffix: str) -> float:
    """The sum over a test's phases of its figure `<phase>SUFFIX` ("": seconds, "_cpu": CPU seconds)."""
    return sum(test.get(phase + suffix, 0.0) for phase in PHASES)


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds during which at least one of SPANS (start, stop) was running."""
    total, reached = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > reached:
            total += stop - max(start, reached)
            reached = stop
    return total


class Measure:
    """Worker side: each phase's CPU, and the slow fixtures of a setup, as the report's user_properties."""

    def __init__(self) -> None:
        self.fixtures: list[tuple[str, float]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Generator[None]:
        started = time.monotonic()
        yield
        took = time.monotonic() - started
        if took >= SLOW_FIXTURE_S:
            self.fixtures.append((fixturedef.argname, round(took, 3)))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None]:
        self.fixtures = []
        yield from self._phase(item, "setup")

    def _phase(self, item: pytest.Item, when: str) -> Generator[None]:
        cpu, busy = process_cpu(), machine_busy()
        yield
        item.user_properties.append((f"{when}_cpu", round(process_cpu() - cpu, 3)))
        item.user_properties.append((f"{when}_busy", round(machine_busy() - busy, 3)))
        if when == "setup" and self.fixtures:
            item.user_properties.append(("fixtures", list(self.fixtures)))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None]:
        yield from self._phase(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None]:
        yield from self._phase(item, "teardown")


class Report:
    """Controller side: collects every phase's report, prints the summary, writes the JSON."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.path = config, Path(config.getoption("timings_json"))
        self.tests: dict[str, dict[str, Any]] = defaultdict(dict)
        self.started, self.busy = time.monotonic(), machine_busy()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = self.tests[report.nodeid]
        test[report.when] = round(report.duration, 3)
        test.setdefault("start", report.start)
        test["stop"] = report.stop
        test.setdefault("outcome", report.outcome)
        if report.outcome != "passed":
            test["outcome"] = report.outcome
        for name, value in report.user_properties:
            test[name] = value
        test["worker"] = getattr(report, "node", None) and report.node.gateway.id  # type: ignore[attr-defined]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        wall, busy = time.monotonic() - self.started, machine_busy() - self.busy
        rows = [(nodeid, phases(t, ""), t) for nodeid, t in self.tests.items()]
        if not rows:
            return
        section, write = terminalreporter.section, terminalreporter.write_line
        section(f"the {SLOWEST} slowest tests (seconds; cpu: the test's process and the children it reaped)")
        write(f"{'total':>8} {'setup':>8} {'call':>8} {'teardown':>8} {'cpu':>7}  test")
        for nodeid, total, t in sorted(rows, key=lambda r: -r[1])[:SLOWEST]:
            times = " ".join(f"{t.get(w, 0.0):8.1f}" for w in PHASES)
            write(f"{total:8.1f} {times} {phases(t, '_cpu'):7.1f}  {nodeid}")
        directories, spent = self._directories(rows), sum(total for _, total, _ in rows) or 1.0
        section("per test directory: wall (some test of it running) and test time (all workers' together)")
        write(f"{'tests':>6} {'wall':>8} {'time':>8} {'share':>6} {'cpu':>8}  directory")
        for name, d in sorted(directories.items(), key=lambda kv: -kv[1]["time"]):
            write(f"{d['tests']:6d} {d['wall']:8.1f} {d['time']:8.1f} {d['time'] / spent:6.1%} {d['cpu']:8.1f}  {name}")
        fixtures = self._fixtures()
        if fixtures:
            section("slow fixture setups (seconds, by fixture)")
            write(f"{'count':>6} {'time':>8}  fixture")
            for name, f in sorted(fixtures.items(), key=lambda kv: -kv[1]["time"])[:15]:
                write(f"{f['count']:6d} {f['time']:8.1f}  {name}")
        workers, cores = self.config.getoption("numprocesses", None) or 0, os.cpu_count() or 1
        on = f" on {workers} workers" if workers else ""
        write(
            f"\n{len(rows)} tests, {spent:.0f} s of test time, {wall:.0f} s wall{on}; the machine's {cores} cores "
            f"{busy / (wall * cores):.0%} busy ({busy:.0f} CPU s), the rest waiting. Every test's phases: {self.path}"
        )
        report = {"wall_s": round(wall, 1), "machine_busy_s": round(busy, 1), "cores": cores, "workers": workers}
        report |= {"directories": directories, "fixtures": fixtures, "tests": self.tests}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(report, indent=1))

    @staticmethod
    def _directories(rows: list[tuple[str, float, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
        directories: dict[str, dict[str, Any]] = defaultdict(lambda: {"tests": 0, "time": 0.0, "cpu": 0.0})
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for nodeid, total, t in rows:
            name = os.path.dirname(nodeid.split("::")[0])
            d = directories[name]
            d["tests"] += 1
            d["time"] = round(d["time"] + total, 3)
            d["cpu"] = round(d["cpu"] + phases(t, "_cpu"), 3)
            if "start" in t:
                spans[name].append((t["start"], t["stop"]))
        for name, d in directories.items():
            d["wall"] = round(covered(spans[name]), 1)
        return dict(directories)

    def _fixtures(self) -> dict[str, dict[str, Any]]:
        fixtures: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "time": 0.0})
        for t in self.tests.values():
            for name, took in t.get("fixtures", []):
                fixtures[name]["count"] += 1
                fixtures[name]["time"] = round(fixtures[name]["time"] + took, 3)
        return dict(fixtures)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--timings-json", default=str(REPORT), help="where the run's timings go (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Measure(), "timing-measure")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) reports
        config.pluginmanager.register(Report(config), "timing-report")
