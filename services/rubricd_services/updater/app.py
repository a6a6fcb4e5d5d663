"""The updater service: step summaries in, new rubric set versions out. Wiring only; the work is in `handler`.

The summaries stream's `updaters` group, read one entry at a time by default
(`max_in_flight=1`: updates of one run must not overtake each other).
"""

from faststream import FastStream

from rubricd.keys import UPDATERS
from rubricd_services.memory.embedder import EMBEDDER
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import ServiceApp, run

from .handler import SERVICE, Updater
from .prompting import QUERY_WRITER, UPDATER
from .settings import UpdaterSettings


def create_app(settings: UpdaterSettings, metrics: Metrics | None = None) -> FastStream:
    agents = [QUERY_WRITER, UPDATER, EMBEDDER]
    app: ServiceApp[Updater] = ServiceApp(SERVICE, settings, metrics, agents=agents, memory=True)
    # A handler may wait for another updater's update of the run (its lock), then update it itself.
    app.consume(app.keys.summaries, UPDATERS, Updater.handle, agents=agents * 2, on_give_up=Updater.given_up)
    return app.build(
        lambda clients: Updater(settings, clients),
        update_frequency=settings.update_frequency,
        static_memory=settings.static_memory,
        dynamic_memory=settings.dynamic_memory,
    )


def main() -> None:
    run(SERVICE, UpdaterSettings, create_app)
