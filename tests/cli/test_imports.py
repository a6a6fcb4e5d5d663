"""The command line, the dashboard and the demo read Redis through the shared package's read-models: importing them
never imports a service (no server needed)."""

import subprocess
import sys

READERS = ("rubricd_services.cli", "rubricd_services.dashboard", "rubricd_services.demo")
SERVICES = ("scorer", "comparer", "arm", "analyzer", "summarizer", "updater", "gateway", "simulator")

# Every module of the readers' packages, then the rubricd_services packages that came with them.
PROBE = f"""
import importlib, pkgutil, sys
for name in {READERS!r}:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        importlib.import_module(module.name)
print(" ".join(sorted({{m.split(".")[1] for m in sys.modules if m.startswith("rubricd_services.")}})))
"""


def test_the_cli_the_dashboard_and_the_demo_import_no_service():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    imported = set(done.stdout.split())
    assert {"cli", "dashboard", "demo"} <= imported
    assert imported.isdisjoint(SERVICES), sorted(imported & set(SERVICES))
