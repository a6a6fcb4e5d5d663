"""The summarizer service: step closures and rollout analyses in, step summaries out.
Wiring only; the work is in `handler`, the accounting in `effects`, the summarizing in `summary`.

- the steps stream and the analyses stream, each read by the `summarizers`
  group: record what arrived, then summarize the step if it is due (the steps
  stream, which trainers write, is trimmed below what is acked);
- every `sweep_interval_s`: look at every open step (deadlines, dead claims).
"""

from faststream import FastStream

from rubricd.keys import SUMMARIZERS
from rubricd_services.memory.embedder import EMBEDDER
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import ServiceApp, run

from .handler import SERVICE, Summarizer
from .settings import SummarizerSettings
from .summary import META_SUMMARIZER, SUMMARIZER


def create_app(settings: SummarizerSettings, metrics: Metrics | None = None) -> FastStream:
    agents = [SUMMARIZER, META_SUMMARIZER, EMBEDDER]
    app: ServiceApp[Summarizer] = ServiceApp(SERVICE, settings, metrics, agents=agents, memory=True)
    # Handlers only record what arrived (no agent: the summarizing runs beside them, under a claim of the step).
    app.consume(app.keys.steps, SUMMARIZERS, Summarizer.on_step_closed, trim=True)
    app.consume(app.keys.analyses, SUMMARIZERS, Summarizer.on_analysis)
    app.every(settings.sweep_interval_s, Summarizer.sweep)
    app.on_shutdown(Summarizer.stop)
    return app.build(lambda clients: Summarizer(settings, clients))


def main() -> None:
    run(SERVICE, SummarizerSettings, create_app)
