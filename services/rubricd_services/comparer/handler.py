"""The comparer's worker: one comparisons entry in, one committed Preference out (or a dead letter).

`handle` validates the entry, gets the prompt's rubric set exactly as a
rollout of that prompt gets it (rubrics.sets: per-instance and generated sets
apply), asks the pairwise judge in one or both orders (`judges.pairwise`), and
commits the Preference with the run's judge accuracy, its event, the reply and
the calls' usage in one step (runtime.answering, with `effects`). A comparison that can never be
judged as sent is rejected: it goes to the dead letters, and the publisher, if
it said where, gets a `rejected` Preference. Any other failure leaves the
entry pending for a reclaim to retry.
"""

import logging
import time
from dataclasses import dataclass

import msgspec
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.messages import Comparison, Event, EventKind, JudgeStatus, Preference, RubricsUpdated
from rubricd_services.judges import pairwise
from rubricd_services.judges.caller import Tally, caller
from rubricd_services.judges.scoring import Judging
from rubricd_services.rubrics import generation
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.rubrics.sets import InForce, RubricCache
from rubricd_services.runtime import events
from rubricd_services.runtime.answering import COMPARISONS, Answered, Answering
from rubricd_services.runtime.intake import Sender
from rubricd_services.runtime.metrics import Metrics
from rubricd_services.runtime.service import Clients
from rubricd_services.state.accuracy import Accuracy, parse_accuracy
from rubricd_services.state.rubric_sets import RubricStore

from . import effects
from .settings import ComparerSettings

SERVICE = COMPARISONS.service
log = logging.getLogger("rubricd.comparer")


class PairwiseMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self.preferences = metrics.counter(
            "rubricd_preferences",
            "comparisons judged, by status (ok, judge_failed, rejected) and outcome (correct, wrong, inconsistent, "
            "unlabelled, none)",
            ["status", "outcome"],
        )
        self.accuracy = metrics.gauge(
            "rubricd_judge_accuracy",
            "pairwise judge accuracy (correct / labelled) of the run's rubric version, after its latest labelled "
            "comparison this comparer judged",
            ["run_id", "rubric_version"],
        )
        self.consistency = metrics.gauge(
            "rubricd_judge_consistency",
            "pairwise position-consistency rate (same winner in both orders) of the run's rubric version",
            ["run_id", "rubric_version"],
        )

    def observe(self, p: Preference) -> None:
        if p.status is not JudgeStatus.OK:
            outcome = "none"
        elif p.consistent is False:
            outcome = "inconsistent"
        elif p.correct is None:
            outcome = "unlabelled"
        else:
            outcome = "correct" if p.correct else "wrong"
        self.preferences.labels(p.status, outcome).inc()


@dataclass(frozen=True)
class PairwiseSet:
    """A rubric set ready to judge comparisons with: the set in force and its pairwise system message."""

    in_force: InForce
    system: str


class Comparer(Answering[Comparison, Preference]):
    """Turns one comparisons entry into one committed Preference."""

    def __init__(self, settings: ComparerSettings, clients: Clients) -> None:
        super().__init__(COMPARISONS, effects.SCRIPT, settings, clients.redis, clients.keys)
        self.settings = settings
        self.metrics = PairwiseMetrics(clients.metrics)
        self.llm = clients.llm
        self.judging = Judging.pairwise(settings, settings.agent(pairwise.PAIRWISE))
        self.rubrics = RubricCache(
            RubricStore(clients.redis, self.keys),
            seeds=Seeds.load(settings),
            per_instance=settings.rubrics_mode == "per_instance",
            prepare=lambda in_force: PairwiseSet(
                in_force, pairwise.system_message(self.judging.template, in_force.set)
            ),
            generator=generation.generator(settings, clients, SERVICE) if settings.generate_rubrics else None,
        )

    async def answer(self, comparison: Comparison) -> Answered[Preference]:
        tally = Tally(pairwise.PAIRWISE)
        preference = await self.judge(comparison, tally)
        spent = tally.usage(self.judging.llm.model)
        return Answered(
            preference, event(comparison, preference), spent, effects.values(self.keys, comparison, preference)
        )

    def rejected(self, sender: Sender, reason: str, comparison: Comparison | None = None) -> Preference:
        """The answer to a comparison that can never be judged as sent (its ids are the sender's)."""
        return COMPARISONS.rejection(Preference, sender, reason, judged_at=time.time())

    async def observe(self, comparison: Comparison, preference: Preference) -> None:
        self.metrics.observe(preference)
        if preference.status is JudgeStatus.OK and preference.label is not None:
            await self.report_accuracy(preference)

    def refused(self, comparison: Comparison | None) -> None:
        self.metrics.preferences.labels(JudgeStatus.REJECTED, "none").inc()

    async def on_rubrics_updated(self, msg: RedisStreamMessage) -> None:
        """Drop the cached set of the updated run (and instance): its next comparison loads the new version."""
        if (reloaded := self.rubrics.reload(wire.decode(msg.body, RubricsUpdated), SERVICE, "comparison")) is not None:
            await self.publish(reloaded)

    async def judge(self, comparison: Comparison, tally: Tally) -> Preference:
        # The rubric set of the prompt, found as a rollout's is (run, step, prompt, instance key).
        prepared = await self.rubrics.get(comparison)
        rubrics = prepared.in_force
        preference = await pairwise.judge_comparison(
            comparison,
            rubrics.set,
            prepared.system,
            pairwise.judge_by(caller(self.llm, tally)),
            both_orders=self.settings.pairwise_both_orders,
            ties=self.settings.pairwise_ties,
            max_chars=self.judging.llm.prompt_chars(),
        )
        if rubrics.generation is None:
            return preference
        return msgspec.structs.replace(
            preference, rubrics_generation=rubrics.generation, rubrics_generation_error=rubrics.generation_error
        )

    async def report_accuracy(self, p: Preference) -> None:
        """The run's accuracy at `p`'s rubric version, now: in the gauges and a judge_accuracy event (bookkeeping:
        a failure is logged, the Preference is committed)."""
        try:
            fields = await self.redis.hgetall(self.keys.accuracy(p.run_id))
            counts = parse_accuracy(fields).versions.get(p.rubric_version, Accuracy())
            labels = (p.run_id, str(p.rubric_version))
            if counts.accuracy is not None:
                self.metrics.accuracy.labels(*labels).set(counts.accuracy)
            if counts.consistency is not None:
                self.metrics.consistency.labels(*labels).set(counts.consistency)
            reported = events.event(
                SERVICE,
                EventKind.JUDGE_ACCURACY,
                run_id=p.run_id,
                step=p.step,
                detail=f"v{p.rubric_version}: {counts.correct} of {counts.labelled} labelled comparisons right",
                rubric_version=p.rubric_version,
                accuracy=counts.accuracy,
                labelled=counts.labelled,
                consistency=counts.consistency,
            )
            await self.publish(reported)
        except Exception:
            log.exception("reporting the judge accuracy of run %s failed", p.run_id)


def event(comparison: Comparison, p: Preference) -> Event:
    """The event of a new Preference."""
    kind = EventKind.COMPARISON_JUDGED if p.status is JudgeStatus.OK else EventKind(p.status)
    if p.status is not JudgeStatus.OK:
        detail = p.error or ""
    elif p.consistent is False:
        detail = p.justification
    else:
        detail = f"winner {p.winner}" + (f" (gatekeeper {p.gatekeeper})" if p.gatekeeper else "")
    return COMPARISONS.event(
        comparison,
        kind,
        detail,
        winner=p.winner,
        consistent=p.consistent,
        label=p.label,
        correct=p.correct,
        gatekeeper=p.gatekeeper,
        rubric_version=p.rubric_version,
        judge_ms=p.judge_ms,
    )
