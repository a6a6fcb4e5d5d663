"""The scorer service: rollouts in, scores out. Wiring only; the work is in `handler`.

- the rollouts stream's `scorers` group: each rollout is scored by one scorer,
  `max_in_flight` at once per process (the consumer pair of runtime.service);
  the stream is trimmed below what every group has acked (no MAXLEN bounds
  what trainers write);
- the rubrics-updated stream, read by every scorer: drop the cached set so the
  next rollout uses the new version; and the rubric-candidates stream (promotion
  gated): the same for a candidate put in shadow or rejected;
- group judging's sweep: the groups due at their deadline are judged by whichever scorer claims them;
- the canary-steps stream's `canaries` group, beside the scoring path: a step's first scored rollout starts its
  judge canaries (judges.evaluation.canaries), so no rollout waits on them.
"""

from faststream import FastStream

from rubricd.keys import CANARIES, SCORERS
from rubricd_services.judges.evaluation.canaries import Canaries, judge
from rubricd_services.judges.verdicts import JUDGE
from rubricd_services.rubrics.generation import GENERATOR
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import ServiceApp, run

from .handler import SERVICE, Scorer
from .settings import ScorerSettings


def create_app(settings: ScorerSettings, metrics: Metrics | None = None) -> FastStream:
    app: ServiceApp[Scorer] = ServiceApp(SERVICE, settings, metrics, agents=[JUDGE, GENERATOR])
    # A handler may wait for another process's generation of the prompt's rubrics, then generate them itself.
    app.consume(app.keys.rollouts, SCORERS, Scorer.handle, agents=[JUDGE, GENERATOR, GENERATOR], trim=True)
    app.listen(app.keys.rubrics_updated, Scorer.on_rubrics_updated)
    app.listen(app.keys.rubric_candidates, Scorer.on_rubrics_updated)
    app.every(settings.group_sweep_s, Scorer.judge_due_groups)
    canaries = Canaries(settings, judge(settings, settings.agent(JUDGE)), app, ttl_s=settings.kept_ttl_s)
    app.consume(app.keys.canary_steps, CANARIES, canaries.handle, agents=[JUDGE])
    return app.build(lambda clients: Scorer(settings, clients))


def main() -> None:
    run(SERVICE, ScorerSettings, create_app)
