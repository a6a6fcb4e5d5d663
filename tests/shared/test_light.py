"""The shared package stays light: importing every module of it imports no service, no settings and no heavy
client (no server needed)."""

import subprocess
import sys

PROBE = """
import importlib, pkgutil, sys
import rubricd
for module in pkgutil.walk_packages(rubricd.__path__, "rubricd."):
    importlib.import_module(module.name)
print(" ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_the_shared_package_imports_no_service_and_no_heavy_client():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    imported = set(done.stdout.split())
    assert "msgspec" in imported and "redis" in imported
    assert imported.isdisjoint({"rubricd_services", "pydantic", "faststream", "weaviate", "openai"})
