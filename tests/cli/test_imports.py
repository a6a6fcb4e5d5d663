"""The command line, the dashboard and the demo read Redis through the shared package's read-models: importing them
never imports a service (no server needed)."""

import subprocess
import sys

READERS = ("rubricd_services.cli", "rubricd_services.dashboard", "rubricd_testbed.demo")
SERVICES = {
    f"rubricd_services.{s}" for s in ("scorer", "comparer", "arm", "analyzer", "summarizer", "updater", "gateway")
}
SERVICES.add("rubricd_testbed.simulator")

# Every module of the readers' packages, then the packages (of the services and of the test bed) that came with them.
PROBE = f"""
import importlib, pkgutil, sys
for name in {READERS!r}:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        importlib.import_module(module.name)
roots = ("rubricd_services.", "rubricd_testbed.")
print(" ".join(sorted({{".".join(m.split(".")[:2]) for m in sys.modules if m.startswith(roots)}})))
"""


def test_the_cli_the_dashboard_and_the_demo_import_no_service():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    imported = set(done.stdout.split())
    assert set(READERS) <= imported
    assert imported.isdisjoint(SERVICES), sorted(imported & SERVICES)
