"""rubricd: follow, inspect and repair a running rubricd deployment.

Settings come from the same RUBRICD_* environment as the services
(RUBRICD_NAMESPACE, RUBRICD_REDIS_URL, RUBRICD_WEAVIATE_URL, RUBRICD_EMBEDDER, ...);
--namespace and --redis-url override them.
"""

import argparse
import asyncio
import sys

from redis.exceptions import ConnectionError as RedisConnectionError

from common.llm import redact
from common.settings import ServiceSettings, load
from rubricd.keys import InvalidKey, Keys

from . import accuracy, acl, dashboard, dlq, export, memory, replay, rubrics, schedule, status, tail
from .context import Context, Failed


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="rubricd", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--namespace", help="key namespace of the deployment (default: RUBRICD_NAMESPACE or rubricd)")
    top.add_argument("--redis-url", help="Redis of the deployment (default: RUBRICD_REDIS_URL)")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (tail, status, dashboard, schedule, accuracy, export, replay, rubrics, memory, dlq, acl):
        module.add(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
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
