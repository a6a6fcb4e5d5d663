"""`make lint`: every module of the shared package is reached from what a trainer imports or the contract defines.

The roots are the client, the adapters, the messages and the JSON Schema; a module of `rubricd` that none of them
imports (directly or not) belongs to the services (rubricd_services.state and the rest), not to the package a
training environment installs. Prints each module that is not reached and exits 1; `--package` and `--roots`
check another tree (the test of this check plants a module that nothing reaches).
"""

import argparse
import sys

import grimp

ROOTS = ("rubricd.client", "rubricd.adapters", "rubricd.messages", "rubricd.schema")


def unreached(package: str, roots: tuple[str, ...]) -> list[str]:
    """The modules of `package` that no root is or imports, its own `__init__` aside."""
    graph = grimp.build_graph(package)
    reached = {package}
    for root in roots:
        found = {m for m in graph.modules if m == root or m.startswith(root + ".")}
        if not found:
            raise SystemExit(f"reach: no module {root} in {package}")
        for module in found:
            reached |= {module} | graph.find_upstream_modules(module)
    return sorted(m for m in graph.modules if m.split(".")[0] == package and m not in reached)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="rubricd")
    parser.add_argument("--roots", nargs="+", default=list(ROOTS))
    args = parser.parse_args()
    orphans = unreached(args.package, tuple(args.roots))
    for module in orphans:
        print(f"{module}: reached from none of {', '.join(args.roots)}: it belongs to the services", file=sys.stderr)
    return 1 if orphans else 0


if __name__ == "__main__":
    sys.exit(main())
