"""The shared package stays light: importing every module of it imports no service, no settings and no heavy
client (no server needed)."""

import os
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


def test_every_shared_module_is_reached_from_the_client_the_adapters_or_the_messages(tmp_path):
    """`make lint`'s reach check passes on the tree and names a module nothing a trainer imports reaches."""
    reach = [sys.executable, "tests/reach.py"]
    assert subprocess.run(reach, capture_output=True, text=True, timeout=120).returncode == 0
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "client.py").write_text("from . import wire\n")
    (package / "wire.py").write_text("")
    (package / "orphan.py").write_text("from . import wire\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [*reach, "--package", "planted", "--roots", "planted.client"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.split(":")[0] == "planted.orphan" and "planted.wire" not in done.stderr
