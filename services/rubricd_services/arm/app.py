"""The arm service: Rubric-ARM training rollouts in, rewards out. Wiring only; the work is in `handler`.

- the arm stream's `arm` group: each rollout is rewarded by one process, `max_in_flight` at once per process; the
  stream is trimmed below what every group has acked.
"""

import math

from faststream import FastStream

from rubricd.keys import ARM
from rubricd_services.judges.pairwise import PAIRWISE
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import ServiceApp, run

from .handler import SERVICE, Rewarder
from .settings import ArmSettings


def create_app(settings: ArmSettings, metrics: Metrics | None = None) -> FastStream:
    app: ServiceApp[Rewarder] = ServiceApp(SERVICE, settings, metrics, agents=[PAIRWISE])
    # A generator rollout's judge calls (two per comparison) run at once, beside those of the process's other
    # rollouts in flight, as many at a time as the agent's slots allow: the deadline waits for every round.
    calls = 2 * settings.arm_max_comparisons * settings.max_in_flight
    rounds = math.ceil(calls / settings.agent(PAIRWISE).concurrency)
    app.consume(app.keys.arm, ARM, Rewarder.handle, agents=[PAIRWISE] * rounds, trim=True)
    return app.build(lambda clients: Rewarder(settings, clients))


def main() -> None:
    run(SERVICE, ArmSettings, create_app)
