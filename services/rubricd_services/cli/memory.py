"""`rubricd memory show | search`: what a run's evaluation memory holds (retention), and a query of it as the
updater makes (hybrid search, same embedder)."""

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import msgspec

from .context import Context, Failed, clip, table

if TYPE_CHECKING:
    from rubricd_services.memory.store import Memory

SUMMARY = "a run's evaluation memory: what it holds, and a search of it"


def arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = sub.add_parser(
        "show",
        help="how many memories of each kind the run holds, from which step to which (what retention kept)",
        description="What a run's memory holds, by kind: memories, first and last step. Retention (the "
        "summarizers' RUBRICD_MEMORY_KEEP_STEPS) keeps each kind it names for the run's last N steps; the rubric "
        "history (rubric_update) is always kept.",
    )
    show.add_argument("run_id", metavar="RUN")
    show.add_argument("--json", action="store_true", help="one JSON object per kind")
    show.set_defaults(handler=run_show)
    search = sub.add_parser(
        "search",
        help="the run's memories closest to a query (what the updater's queries see)",
        description="Hybrid search (vector + BM25) of a run's analyses, chunk and step summaries "
        "and rubric updates, with the embedder the services use (RUBRICD_EMBEDDER).",
    )
    search.add_argument("run_id", metavar="RUN")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=10)
    search.add_argument(
        "--kind",
        nargs="+",
        action="extend",
        choices=["analysis", "chunk_summary", "step_summary", "rubric_update"],
        help="only these kinds",
    )
    search.add_argument("--instance-key", help="only memories of this instance key")
    search.add_argument("--alpha", type=float, default=0.5, help="1 = vectors only, 0 = keywords only (default 0.5)")
    search.add_argument("--full", action="store_true", help="print whole texts, not one line each")
    search.add_argument("--json", action="store_true", help="one JSON object per hit")
    search.set_defaults(handler=run_search)


@contextlib.asynccontextmanager
async def connected(ctx: Context) -> AsyncIterator["Memory"]:
    """The namespace's memory, with the embedder the services use (loaded only when a search needs it)."""
    # Imported here: the Weaviate client and the embedder are slow to load, and only these commands need them.
    from rubricd_services.llm import LLMClient
    from rubricd_services.memory.embedder import EMBEDDER, make_embedder
    from rubricd_services.memory.store import Memory

    llm = LLMClient.from_settings(ctx.settings, [EMBEDDER]) if ctx.settings.embedder == "openai" else None
    try:
        memory = await Memory.connect(ctx.settings, make_embedder(ctx.settings, llm))
    except Exception as e:
        raise Failed(
            f"cannot reach the memory at {ctx.settings.weaviate_url} (gRPC port {ctx.settings.weaviate_grpc_port}): {e}"
        ) from None
    try:
        yield memory
    finally:
        await memory.close()
        if llm is not None:
            await llm.aclose()


async def run_show(args: argparse.Namespace, ctx: Context) -> int:
    async with connected(ctx) as memory:
        kept = await memory.kept(args.run_id)
    if not kept:
        raise Failed(f"run {args.run_id!r} has no memories")
    if args.json:
        for kind, k in kept.items():
            print(msgspec.json.encode({"kind": str(kind), **msgspec.structs.asdict(k)}).decode())
        return 0
    print(
        table(
            [[kind, k.count, k.first_step, k.last_step] for kind, k in kept.items()],
            ["KIND", "MEMORIES", "FROM STEP", "TO STEP"],
        )
    )
    return 0


async def run_search(args: argparse.Namespace, ctx: Context) -> int:
    from rubricd_services.memory.store import MemoryKind

    async with connected(ctx) as memory:
        kinds = [MemoryKind(k) for k in args.kind] if args.kind else None
        hits = await memory.search(
            args.run_id, args.query, limit=args.limit, kinds=kinds, instance_key=args.instance_key, alpha=args.alpha
        )
    if args.json:
        for h in hits:
            item = {
                "id": h.id,
                "score": h.score,
                "kind": str(h.item.kind),
                "step": h.item.step,
                "ref": h.item.ref,
                "instance_key": h.item.instance_key,
                "text": h.item.text,
            }
            print(msgspec.json.encode(item).decode())
        return 0
    if not hits:
        print(f"no memories of run {args.run_id!r} match")
        return 0
    if args.full:
        for h in hits:
            print(f"[{h.item.kind} step {h.item.step} {h.item.ref} score {h.score:.3f}]\n{h.item.text}\n")
        return 0
    rows = [[h.item.kind, h.item.step, f"{h.score:.3f}", h.item.ref, clip(h.item.text, 110)] for h in hits]
    print(table(rows, ["KIND", "STEP", "SCORE", "REF", "TEXT"]))
    return 0
