"""`rubricd serve NAME`: run one service in this process, or N processes of a consumer service.

stack.sh, the Dockerfile, compose and the Kubernetes manifests all start services this way.
"""

import argparse
import importlib
import os
import signal
import socket
import subprocess
import sys

# Services that read a consumer group: N processes of one are N consumers of its group.
CONSUMERS = ("scorer", "comparer", "arm", "analyzer", "summarizer", "updater")
# The gateway (HTTP in front of the scorer), the dashboard (a live page of the runs) and the simulator (an LLM
# stand-in for tests and the demo).
SERVERS = ("gateway", "dashboard", "simulator")


SUMMARY = "run a service: scorer, comparer, arm, analyzer, summarizer, updater, gateway, dashboard, simulator"
HELP = """\
Run a service until SIGTERM/SIGINT, with its settings from RUBRICD_*. The dashboard takes its own
flags after its name (--host 127.0.0.1, --port 8400, --refresh 2 seconds; --namespace and --redis-
url before `serve` override its settings), and so does the simulator (--host, --port, --latency-ms,
--fail-rate, --failures, ...; RUBRICD_SIM_*).
"""


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=[*CONSUMERS, *SERVERS])
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="consumer services: processes to run, each its own consumer of the group (default 1: this process)",
    )


def serve(args: argparse.Namespace, extra: list[str]) -> int:
    """Run args.name (`extra`: the dashboard's or the simulator's own flags); returns the exit status."""
    if args.workers < 1:
        sys.exit("rubricd serve: --workers must be >= 1")
    if args.name == "dashboard":
        if args.workers > 1:
            sys.exit(f"rubricd serve dashboard: --workers is for {', '.join(CONSUMERS)}")
        from rubricd_services.dashboard.app import main as dashboard

        dashboard(extra, namespace=args.namespace, redis_url=args.redis_url)
        return 0
    if args.name == "simulator":
        from rubricd_testbed.simulator.main import main as simulator

        simulator([*extra, "--workers", str(args.workers)] if args.workers > 1 else extra)
        return 0
    if extra:
        sys.exit(f"rubricd serve {args.name}: unrecognized arguments: {' '.join(extra)}")
    if args.workers > 1:
        if args.name not in CONSUMERS:
            sys.exit(f"rubricd serve {args.name}: --workers is for {', '.join(CONSUMERS)}")
        return supervise(args.name, args.workers)
    importlib.import_module(f"rubricd_services.{args.name}.app").main()
    return 0


def supervise(name: str, workers: int) -> int:
    """Run `workers` processes of a consumer service, each its own consumer; stop them all on SIGTERM/SIGINT.

    With RUBRICD_METRICS_PORT=P, worker i serves /health and /metrics on P + i.
    """
    base = os.environ.get("RUBRICD_CONSUMER") or f"{socket.gethostname()}-{os.getpid()}"
    port = os.environ.get("RUBRICD_METRICS_PORT")
    if port and not port.isdigit():
        sys.exit(f"RUBRICD_METRICS_PORT: not a port number: {port!r}")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "rubricd_services.cli", "serve", name],
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
