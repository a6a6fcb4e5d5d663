"""Run the LLM simulator (test/demo tool, not a model).

    rubricd serve simulator --host 127.0.0.1 --port 8099 --latency-ms 500 --fail-rate 0.05

Flags override the environment (RUBRICD_SIM_*), which overrides the defaults.
"""

import argparse
import logging
import os

import msgspec
import uvicorn

from . import BANNER
from .app import create_app, serve_workers, server_config
from .faults import DIALECTS, SimConfig, kinds


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="rubricd serve simulator", description=BANNER)
    p.add_argument("--host", default=os.environ.get("RUBRICD_SIM_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("RUBRICD_SIM_PORT", "8099")))
    p.add_argument("--latency-ms", type=float, help="mean latency of a chat completion")
    p.add_argument("--latency-jitter-ms", type=float, help="latency is uniform in mean ± jitter")
    p.add_argument("--fail-rate", type=float, help="probability that a request fails at random")
    p.add_argument("--flip-rate", type=float, help="probability that a judge verdict's `met` is inverted")
    p.add_argument(
        "--churn", action="store_true", default=None, help="an updater that reweights a rubric when it would not change"
    )
    p.add_argument(
        "--harmful",
        choices=["inverted", "collateral"],
        help="a run's first proposal that adds a rubric is harmful: the adds' signs inverted, or an honest penalty",
    )
    p.add_argument("--failures", type=kinds, help="comma list: timeout,429,500,malformed,invalid,truncated")
    p.add_argument("--timeout-hold-s", type=float, help="how long a `timeout` failure holds a request")
    p.add_argument("--cache-ttl-s", type=float, help="prefix-cache lifetime of a system message")
    p.add_argument("--slots", type=int, help="chat completions served at once (the rest wait in line)")
    p.add_argument("--retry-after-s", type=float, help="a 429 or 503 says Retry-After this many seconds")
    p.add_argument(
        "--dialects",
        type=lambda text: [d.strip() for d in text.split(",") if d.strip()],
        help=f"comma list of the structured-output requests honoured (default all: {','.join(DIALECTS)})",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("RUBRICD_SIM_WORKERS", "1")),
        help="processes serving the port (with more than one, /admin/* reaches one of them)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = p.parse_args(argv)

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    flags = {k: v for k, v in vars(args).items() if k in SimConfig.__struct_fields__ and v is not None}
    try:
        config = msgspec.structs.replace(SimConfig.from_env(), **flags)
        config.__post_init__()
    except ValueError as e:
        p.error(str(e))
    if args.workers < 1:
        p.error("--workers must be >= 1")
    if args.workers > 1:
        serve_workers(config, args.workers, args.host, args.port, args.log_level)
    else:
        uvicorn.Server(server_config(create_app(config), args.host, args.port, log_level=args.log_level)).run()
