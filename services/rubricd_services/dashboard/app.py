"""`rubricd serve dashboard`: a live web page of a deployment, for watching a run while it trains.

Per run: each step's mean reward (total, meta-classes, rubrics' met rates), the latest step's rubric health, judge
failures, rubric versions and why they changed, the active meta-class, and any kept rollout with its verdicts (a trajectory turn by turn, beside
each turn the verdicts naming it); for the deployment: consumer groups' pending and lag, and the event tail. It reads only what the services write (rewards from the runs' kept rollouts) and writes nothing, so
the `cli` Redis user is enough. Served on 127.0.0.1 by default: it has no authentication of its own.
"""

import argparse
import asyncio
import contextlib
import html
import sys
from collections.abc import AsyncIterator
from importlib.resources import files

import msgspec
import uvicorn
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from rubricd.keys import InvalidKey, Keys
from rubricd.messages import EventKind
from rubricd_services.settings import ServiceSettings, load

from .reader import Reader


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rubricd serve dashboard", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8400, help="port to serve on (default 8400)")
    p.add_argument("--refresh", type=float, default=2.0, help="seconds between the page's updates (default 2)")
    return p


def main(argv: list[str] | None = None, *, namespace: str | None = None, redis_url: str | None = None) -> None:
    """Serve the page until SIGTERM/SIGINT, with the settings from RUBRICD_* (`namespace`, `redis_url`: rubricd's
    --namespace and --redis-url, which override them)."""
    args = parser().parse_args(argv)
    settings = load(ServiceSettings)
    overrides = {k: v for k, v in {"namespace": namespace, "redis_url": redis_url}.items() if v}
    if overrides:
        settings = settings.model_copy(update=overrides)  # the namespace is checked by Keys
    try:
        keys = Keys(settings.namespace)
    except InvalidKey as e:
        sys.exit(f"rubricd serve dashboard: {e}")
    page = app(settings, keys, args.refresh)
    server = uvicorn.Server(uvicorn.Config(page, host=args.host, port=args.port, log_level="warning"))
    print(f"rubricd dashboard on http://{args.host}:{args.port}/ (namespace {keys.namespace})", flush=True)
    asyncio.run(server.serve())


def app(settings: ServiceSettings, keys: Keys, refresh_s: float) -> Starlette:
    page = files(__package__).joinpath("static/dashboard.html").read_text()
    script = files(__package__).joinpath("static/dashboard.js").read_text()
    for name, value in {
        "namespace": html.escape(keys.namespace),
        "refresh_ms": str(int(refresh_s * 1000)),
        "event_kinds": msgspec.json.encode(list(EventKind)).decode(),
    }.items():
        page = page.replace("{{" + name + "}}", value)
    reader: Reader | None = None

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        nonlocal reader
        redis = Redis.from_url(settings.redis_url, decode_responses=False)
        try:
            reader = Reader(settings, keys, redis)
            yield
        finally:
            await redis.aclose()

    def read() -> Reader:
        assert reader is not None, "the lifespan opens the reader"
        return reader

    async def index(_: Request) -> Response:
        return HTMLResponse(page)

    async def health(_: Request) -> Response:
        """204 while Redis answers (a probe's), else 503."""
        try:
            await read().redis.ping()
        except RedisError:
            return Response(status_code=503)
        return Response(status_code=204)

    async def dashboard_js(_: Request) -> Response:
        return Response(script, media_type="text/javascript")

    async def runs(_: Request) -> Response:
        return _json({"namespace": keys.namespace, "runs": await read().runs()})

    async def run_view(request: Request) -> Response:
        return _json(await read().run(request.path_params["run_id"], request.query_params.get("cursor", "")))

    async def step_rollouts(request: Request) -> Response:
        step = request.query_params.get("step")
        if step is not None and not step.isdigit():
            return _json({"error": "step is a number"}, status_code=400)
        return _json(await read().step_rollouts(request.path_params["run_id"], int(step) if step is not None else None))

    async def rollout_view(request: Request) -> Response:
        """One kept rollout, by `?id=` (a rollout id may hold a slash)."""
        found = await read().rollout(request.path_params["run_id"], request.query_params.get("id", ""))
        if found is None:
            return _json({"error": "no such kept rollout (never kept, or trimmed since)"}, status_code=404)
        return _json(found)

    async def groups(_: Request) -> Response:
        return _json(await read().groups())

    async def events(request: Request) -> Response:
        q = request.query_params
        return _json(await read().events(q.get("run") or None, q.get("service") or None, q.get("kind") or None))

    return Starlette(
        routes=[
            Route("/", index),
            Route("/health", health),
            Route("/dashboard.js", dashboard_js),
            Route("/api/runs", runs),
            Route("/api/runs/{run_id:str}", run_view),
            Route("/api/runs/{run_id:str}/rollouts", step_rollouts),
            Route("/api/runs/{run_id:str}/rollout", rollout_view),
            Route("/api/groups", groups),
            Route("/api/events", events),
        ],
        lifespan=lifespan,
    )


def _json(body: object, status_code: int = 200) -> Response:
    return Response(
        msgspec.json.encode(body),
        status_code=status_code,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )
