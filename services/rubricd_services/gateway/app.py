"""The gateway service: HTTP reward requests in, rollouts out, scores back. Wiring only; the work is in
`gateway`, the routes in `http`, each framework's contract in `contracts`.

It consumes no stream: its broker serves /health (the ping), and its one RubricdClient publishes rollouts and
reads its own reply stream. Its HTTP listener always runs (RUBRICD_GATEWAY_PORT, default 8300) and serves the reward
routes beside /health and /metrics.
"""

import asyncio
import logging
from typing import Any

from faststream.asgi import AsgiFastStream, make_ping_asgi
from prometheus_client import make_asgi_app

from rubricd_services.runtime.logs import configure_logging
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import ServiceApp
from rubricd_services.settings import load

from . import http
from .gateway import SERVICE, RewardGateway
from .settings import GatewaySettings


def create_app(settings: GatewaySettings, metrics: Metrics | None = None) -> AsgiFastStream:
    app: ServiceApp[RewardGateway] = ServiceApp(SERVICE, settings, metrics)
    app.on_shutdown(RewardGateway.close)
    stream_app = app.build(
        lambda clients: RewardGateway(settings, clients),
        port=settings.gateway_port,
        max_rollouts_in_flight=settings.max_rollouts_in_flight,
    )
    routes: list[tuple[str, Any]] = [
        *http.routes(lambda: app.worker),
        ("/health", make_ping_asgi(app.broker, timeout=5.0)),
        ("/metrics", make_asgi_app(app.metrics.registry)),
    ]
    return stream_app.as_asgi(asgi_routes=routes)


def main() -> None:
    """As runtime.service.run, but the HTTP listener is the service itself: always on, on RUBRICD_GATEWAY_PORT."""
    settings = load(GatewaySettings)
    configure_logging(settings)
    app = create_app(settings, Metrics(SERVICE))
    # log_config=None: uvicorn logs through our handler (JSON, redacted) instead of its own.
    options: dict[str, Any] = {
        "host": settings.gateway_host,
        "port": settings.gateway_port,
        "access_log": "false",
        "log_config": None,
    }
    asyncio.run(app.run(log_level=logging.INFO, run_extra_options=options))
