"""rubricd: run, follow, inspect and repair a rubricd deployment.

Settings come from the same RUBRICD_* environment as the services
(RUBRICD_NAMESPACE, RUBRICD_REDIS_URL, RUBRICD_WEAVIATE_URL, RUBRICD_EMBEDDER, ...);
--namespace and --redis-url override them.
"""

import argparse
import asyncio
import sys

from redis.exceptions import ConnectionError as RedisConnectionError

from rubricd.keys import InvalidKey, Keys
from rubricd_services.llm import redact
from rubricd_services.settings import ServiceSettings, load

from . import (
    accuracy,
    acl,
    archive,
    arm,
    dlq,
    endpoint,
    export,
    judge,
    memory,
    plan,
    rescore,
    rubrics,
    schedule,
    serve,
    status,
    tail,
)
from .context import Context, Failed


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="rubricd", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--namespace", help="key namespace of the deployment (default: RUBRICD_NAMESPACE or rubricd)")
    top.add_argument("--redis-url", help="Redis of the deployment (default: RUBRICD_REDIS_URL)")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # A command is a module named as it: SUMMARY (its line here), HELP (its own --help; else the summary),
    # `arguments(parser)`, which sets its handler, and the handler.
    for module in (
        serve,
        tail,
        status,
        schedule,
        accuracy,
        arm,
        judge,
        export,
        rescore,
        rubrics,
        memory,
        archive,
        dlq,
        acl,
        plan,
        endpoint,
    ):
        module.arguments(
            commands.add_parser(
                module.__name__.rpartition(".")[2],
                help=module.SUMMARY,
                description=getattr(module, "HELP", module.SUMMARY),
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    return top


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args, extra = top.parse_known_args(argv)
    if args.command == "serve":  # a service loads its own settings; the dashboard, the simulator their own flags
        return serve.serve(args, extra)
    if extra:
        top.error(f"unrecognized arguments: {' '.join(extra)}")
    settings = load(ServiceSettings)
    overrides = {k: v for k, v in {"namespace": args.namespace, "redis_url": args.redis_url}.items() if v}
    if overrides:
        settings = settings.model_copy(update=overrides)  # the namespace is checked by Keys
    try:
        ctx = Context(settings, Keys(settings.namespace))
        return asyncio.run(args.handler(args, ctx)) or 0
    except (Failed, InvalidKey) as e:
        print(f"rubricd {args.command}: {e}", file=sys.stderr)
        return 1
    except RedisConnectionError as e:
        print(f"rubricd {args.command}: cannot reach Redis at {redact(settings.redis_url)}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
