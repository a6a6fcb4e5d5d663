"""`rubricd acl`: the Redis ACL file of a locked-down deployment (see cli.redis_acl)."""

import argparse
from pathlib import Path

from rubricd_services.cli.redis_acl import ADMIN, acl_file, users

from .context import Context, Failed

SUMMARY = "print the Redis ACL file of a locked-down deployment"
HELP = """\
Print the Redis ACL file (for redis-server --aclfile) of this namespace: default off, admin, one
user per service, cli, keda (KEDA's scaler) and each trainer, limited to the commands and keys it
needs. Passwords are read from DIR/redis-<user> and written as SHA-256 hashes.
"""


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--passwords", type=Path, required=True, metavar="DIR", help="holds one file redis-<user> per user")
    p.add_argument(
        "--trainer",
        action="append",
        metavar="NAME",
        help="a trainer user (repeatable; default: trainer); its client ids start with NAME-",
    )
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    trainers = args.trainer or ["trainer"]
    passwords = {}
    try:  # every user of the deployment but default
        names = [ADMIN, *(user.name for user in users(ctx.keys, trainers))]
    except ValueError as e:  # a trainer name that cannot prefix its client ids
        raise Failed(str(e)) from None
    for user in names:
        path = args.passwords / f"redis-{user}"
        try:
            passwords[user] = path.read_text().strip()
        except OSError as e:
            raise Failed(f"no password for {user}: {e}") from None
        if not passwords[user]:
            raise Failed(f"no password for {user}: {path} is empty")
    print(acl_file(ctx.keys, passwords, trainers), end="")
    return 0
