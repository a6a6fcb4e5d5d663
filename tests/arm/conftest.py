"""The `rubricd` command and preference sets for the arm service's integration tests (see tests/support/services.py)."""

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import forks


@pytest.fixture
def rubricd(service_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """rubricd(*args, ok=True): the command in this test's namespace; with ok, it must succeed."""

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = forks.run(*args, env=service_env, timeout=120)
        assert not ok or done.returncode == 0, done.stderr
        return done

    return run


@pytest.fixture
def preferences(tmp_path: Path) -> Callable[[list[dict[str, str]]], Path]:
    """preferences(lines): a preference set file."""

    def write(lines: list[dict[str, str]]) -> Path:
        path = tmp_path / "preferences.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return path

    return write
