"""The comparer service: comparisons in, preferences out. Wiring only; the work is in `handler`.

- the comparisons stream's `comparers` group: each comparison is judged by one comparer, `max_in_flight` at
  once per process; the stream is trimmed below what every group has acked;
- the rubrics-updated stream, read by every comparer: drop the cached set so the next comparison uses the new
  version.
"""

from faststream import FastStream

from rubricd.keys import COMPARERS
from rubricd_services.judges.pairwise import PAIRWISE
from rubricd_services.rubrics.generation import GENERATOR
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import ServiceApp, run

from .handler import SERVICE, Comparer
from .settings import ComparerSettings


def create_app(settings: ComparerSettings, metrics: Metrics | None = None) -> FastStream:
    app: ServiceApp[Comparer] = ServiceApp(SERVICE, settings, metrics, agents=[PAIRWISE, GENERATOR])
    # A handler may wait for another process's generation of the prompt's rubrics, then generate them itself.
    app.consume(app.keys.comparisons, COMPARERS, Comparer.handle, agents=[PAIRWISE, GENERATOR, GENERATOR], trim=True)
    app.listen(app.keys.rubrics_updated, Comparer.on_rubrics_updated)
    return app.build(lambda clients: Comparer(settings, clients))


def main() -> None:
    run(SERVICE, ComparerSettings, create_app)
