"""The analyzer service: scored rollouts in, rollout analyses out. Wiring only; the work is in `handler`.

Every analyzer process is one consumer of the scored stream's `analyzers`
group, so any number of them (`--workers N`, or processes on other machines)
share the work and each entry is analyzed by one of them. The group's lag is
what tells an operator (or KEDA) to add workers.
"""

from faststream import FastStream

from rubricd.keys import ANALYZERS
from rubricd_services.memory.embedder import EMBEDDER
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import ServiceApp, run

from .analysis import ANALYZER
from .handler import SERVICE, SWEEP_INTERVAL_S, Analyzer
from .settings import AnalyzerSettings


def create_app(settings: AnalyzerSettings, metrics: Metrics | None = None) -> FastStream:
    app: ServiceApp[Analyzer] = ServiceApp(SERVICE, settings, metrics, agents=[ANALYZER, EMBEDDER], memory=True)
    app.consume(app.keys.scored, ANALYZERS, Analyzer.handle, agents=[ANALYZER, EMBEDDER], on_give_up=Analyzer.given_up)
    app.every(SWEEP_INTERVAL_S, Analyzer.sweep)
    app.on_shutdown(Analyzer.stop)
    return app.build(lambda clients: Analyzer(settings, clients))


def main() -> None:
    run(SERVICE, AnalyzerSettings, create_app)
