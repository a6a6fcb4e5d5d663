"""The trainers' venvs, built by make where missing (`make frameworks`, `make agents`, `make nemo-gym`), and a
script of tests/frameworks run by one of them against the test stack."""

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from rubricd.keys import Keys
from tests.support.stack import REPO, Stack
from tests.threads import one_thread


def _built_python(target: str) -> str:
    """The python `make TARGET-python` names, after `make TARGET` has built it where missing (cached outside the
    repo)."""
    subprocess.run(["make", "-s", target], cwd=REPO, check=True, timeout=1200)
    done = subprocess.run(["make", "-s", "--no-print-directory", f"{target}-python"], cwd=REPO, capture_output=True)
    return done.stdout.decode().strip()


@pytest.fixture(scope="session")
def frameworks_python() -> str:
    """`make frameworks`'s venv: torch, TRL, OpenRLHF's reward client, verl's reward loop."""
    return _built_python("frameworks")


@pytest.fixture(scope="session")
def agents_python() -> str:
    """`make agents`'s venv: OpenPipe ART, verifiers."""
    return _built_python("agents")


@pytest.fixture(scope="session")
def nemo_gym_python() -> str:
    """`make nemo-gym`'s Debian trixie root (Python 3.13, NeMo Gym 0.4.0; built as root, once)."""
    return _built_python("nemo-gym")


@pytest.fixture
def run_framework(stack: Stack, keys: Keys, tmp_path: Path) -> Callable[..., str]:
    """`run_framework(python, script, *args, run=RUN, input=None, **env)`: tests/frameworks/SCRIPT run by PYTHON (a
    framework's venv) against this stack's Redis in the test's namespace (RUBRICD_REDIS_URL, RUBRICD_NAMESPACE,
    RUN_ID), the checkout's shared package on its path, HOME a temporary directory, and ENV; its stdout. A
    script that fails fails the test with its stderr."""

    def run(python: str, script: str, *args: object, run: str, input: str | None = None, **env: str) -> str:
        done = subprocess.run(
            [python, str(REPO / "tests" / "frameworks" / script), *map(str, args)],
            cwd=REPO,  # a framework run in a root of its own (NeMo Gym's) sees the checkout it is run from
            input=input,
            env={
                "PATH": "/usr/bin:/bin",
                **one_thread(),
                "HOME": str(tmp_path),
                "PYTHONPATH": str(REPO / "shared"),
                "RUBRICD_REDIS_URL": stack.redis_url,
                "RUBRICD_NAMESPACE": keys.namespace,
                "RUN_ID": run,
                **env,
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

    return run
