"""`python -m analyzer [--workers N]`: one analyzer, or N worker processes sharing the group."""

import argparse
import os
import signal
import socket
import subprocess
import sys


def supervise(workers: int) -> int:
    """Run `workers` analyzer processes, each its own consumer; stop them all on SIGTERM/SIGINT.

    With RUBRICD_METRICS_PORT=P, worker i serves /health and /metrics on P + i.
    """
    base = os.environ.get("RUBRICD_CONSUMER") or f"{socket.gethostname()}-{os.getpid()}"
    port = os.environ.get("RUBRICD_METRICS_PORT")
    if port and not port.isdigit():
        sys.exit(f"RUBRICD_METRICS_PORT: not a port number: {port!r}")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "analyzer"],
            env={
                **os.environ,
                "RUBRICD_CONSUMER": f"{base}-w{i}",
                **({"RUBRICD_METRICS_PORT": str(int(port) + i)} if port else {}),
            },
        )
        for i in range(workers)
    ]

    def stop(signum: int, frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c), 0)


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m analyzer", description=__doc__)
    parser.add_argument("--workers", type=int, default=1, help="worker processes to run (default 1: this process)")
    args = parser.parse_args()
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    if args.workers == 1:
        from .app import main

        main()
    else:
        sys.exit(supervise(args.workers))


cli()
