"""`rubricd` processes forked instead of started: from a server that has imported rubricd's services once
(multiprocessing's forkserver), so that a service or a CLI command costs a fork, not an interpreter and a second or
two of CPU importing FastStream, pydantic, openai and the Weaviate client.

Each is still a process of its own, with its own environment, output and exit status, signalled, killed and waited
for as any other: `Forked` has the part of `subprocess.Popen` the tests use, `run` that of `subprocess.run`. What is
tested about starting a process from nothing (`rubricd serve` from stack.sh, compose, the Dockerfile, the console
script) is tested by the tests that start one.
"""

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from rubricd_services.cli.serve import CONSUMERS, SERVERS

# What the server imports before it forks anything: the CLI and every service it can serve.
PRELOAD = ["rubricd_services.cli.__main__", *(f"rubricd_services.{name}.app" for name in (*CONSUMERS, *SERVERS))]

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _rubricd(argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the child: ENV as its whole environment, OUT and ERR as its stdout and stderr, then `rubricd ARGV`."""
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    from rubricd_services.cli.__main__ import main

    try:
        code = main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


class Forked:
    """`python -m rubricd_services.cli ARGV` with ENV, its stdout to OUT and stderr to ERR (the same file if ERR is
    None), forked."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], out: Path, err: Path | None = None) -> None:
        self.args = ["rubricd", *argv]
        self._process = _context.Process(
            target=_rubricd, args=(list(argv), dict(env), str(out), str(err or out)), daemon=True
        )
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once it has exited (-N for signal N), else None."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def run(*argv: str, env: Mapping[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`rubricd ARGV` with ENV until it exits: its status, stdout and stderr (killed after TIMEOUT seconds)."""
    with tempfile.TemporaryDirectory(prefix="rubricd-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        process = Forked(argv, env, out, err)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        return subprocess.CompletedProcess(process.args, code, out.read_text(), err.read_text())
