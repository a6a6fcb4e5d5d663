"""The scorer's second worker: one comparisons entry in, one committed Preference out (or a dead letter).

`handle` validates the entry, gets the prompt's rubric set exactly as a
rollout of that prompt gets it (the scorer's own RubricCache: per-instance and
generated sets apply), asks the pairwise judge in one or both orders
(`pairwise`), and commits the Preference with the run's judge accuracy, its
event, the reply and the calls' usage in one step (`preferences`). A
comparison that can never be judged as sent is rejected: it goes to the dead
letters, and the publisher, if it said where, gets a `rejected` Preference.
Any other failure leaves the entry pending for a reclaim to retry.

It runs in the scorer's process and shares its clients: `create_app` makes
the Comparer with the metrics, and each entry reaches it with the Scorer.
"""

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.keys import JUDGES, InvalidKey
from rubricd.messages import (
    Comparison,
    Event,
    EventKind,
    JudgeStatus,
    Preference,
)
from rubricd_services.common import streams, usage
from rubricd_services.common.llm import Completion, LLMError
from rubricd_services.common.metrics import Metrics
from rubricd_services.common.streams import Notice, Rejected

from . import pairwise
from .accuracy import Accuracy, parse_accuracy
from .handler import SERVICE, Scorer
from .pairwise import PairwiseFailed
from .preferences import PreferenceEffects
from .settings import ScorerSettings

log = logging.getLogger("rubricd.scorer.compare")


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
            "comparison this scorer judged",
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


class Comparer:
    """Turns one comparisons entry into one committed Preference, with the Scorer's clients and rubric sets."""

    def __init__(self, settings: ScorerSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = PairwiseMetrics(metrics)
        self.template = pairwise.load_template(settings.pairwise_prompt)
        self.agent = settings.agent(pairwise.PAIRWISE)
        self._effects: PreferenceEffects | None = None

    def effects(self, scorer: Scorer) -> PreferenceEffects:
        if self._effects is None:
            s = self.settings
            self._effects = PreferenceEffects(
                scorer.redis,
                scorer.keys,
                JUDGES,
                preference_ttl_s=s.score_ttl_s,
                maxlen=s.stream_maxlen,
                reply_ttl_s=s.reply_ttl_s,
                kept_maxlen=s.preferences_maxlen,
                kept_ttl_s=s.preferences_ttl_s,
            )
        return self._effects

    async def handle(self, scorer: Scorer, msg: RedisStreamMessage) -> None:
        comparison = self.validate(scorer, msg.body)
        calls = Calls()
        # Published again (or redelivered after its commit): no judge calls, the commit replies its first Preference.
        stored = await scorer.redis.get(scorer.keys.preference(comparison.run_id, comparison.comparison_id))
        if stored is not None:
            preference = wire.decode(stored, Preference)
        else:
            preference = await self.judge(scorer, comparison, calls)
        event = self.event(comparison, preference)
        spent = calls.usage(self.agent.model)
        if not await self.effects(scorer).commit(streams.entry_id(msg), comparison, preference, event, spent):
            log.info(
                "comparison %s/%s was already judged; replied with its first preference",
                comparison.run_id,
                comparison.comparison_id,
            )
            return
        self.metrics.observe(preference)
        if preference.status is JudgeStatus.OK and preference.label is not None:
            await self.report_accuracy(scorer, preference)

    async def judge(self, scorer: Scorer, comparison: Comparison, calls: "Calls") -> Preference:
        # The rubric set of the prompt, found as a rollout's is (run, step, prompt, instance key).
        rubrics = await scorer.rubrics.get(comparison)
        preference = await pairwise.judge_comparison(
            comparison,
            rubrics.set,
            pairwise.system_message(self.template, rubrics.set),
            self.caller(scorer, calls),
            both_orders=self.settings.pairwise_both_orders,
            ties=self.settings.pairwise_ties,
            max_chars=self.agent.prompt_chars(),
        )
        if rubrics.generation is None:
            return preference
        return msgspec.structs.replace(
            preference, rubrics_generation=rubrics.generation, rubrics_generation_error=rubrics.generation_error
        )

    def caller(self, scorer: Scorer, calls: "Calls") -> pairwise.PairJudge:
        async def call(messages: list[dict[str, str]], answer: type[msgspec.Struct]) -> tuple[msgspec.Struct, int]:
            try:
                done = await scorer.gateway.structured(pairwise.PAIRWISE, messages, answer)
            except LLMError as e:
                raise PairwiseFailed(str(e)) from None
            calls.completions.append(done)
            return done.value, done.attempts

        return call

    async def report_accuracy(self, scorer: Scorer, p: Preference) -> None:
        """The run's accuracy at `p`'s rubric version, now: in the gauges and a judge_accuracy event (bookkeeping:
        a failure is logged, the Preference is committed)."""
        try:
            fields = await scorer.redis.hgetall(scorer.keys.accuracy(p.run_id))
            counts = parse_accuracy(fields).versions.get(p.rubric_version, Accuracy())
            labels = (p.run_id, str(p.rubric_version))
            if counts.accuracy is not None:
                self.metrics.accuracy.labels(*labels).set(counts.accuracy)
            if counts.consistency is not None:
                self.metrics.consistency.labels(*labels).set(counts.consistency)
            event = streams.event(
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
            await scorer.redis.xadd(
                scorer.keys.events, wire.entry(event), maxlen=self.settings.stream_maxlen, approximate=True
            )
        except Exception:
            log.exception("reporting the judge accuracy of run %s failed", p.run_id)

    def validate(self, scorer: Scorer, body: bytes) -> Comparison:
        """The comparison, or Rejected (counted, and with a rejected Preference for the publisher if it said
        where)."""
        try:
            if len(body) > self.settings.max_comparison_bytes:
                limit = self.settings.max_comparison_bytes
                raise Rejected(f"oversized comparison: {len(body)} bytes > max_comparison_bytes={limit}")
            comparison = streams.decode(body, Comparison, "comparison")
            if comparison.reply_to is not None:
                scorer.keys.check_reply_to(comparison.reply_to)
            return comparison
        except (Rejected, InvalidKey) as e:
            self.metrics.preferences.labels(JudgeStatus.REJECTED, "none").inc()
            raise Rejected(str(e), notify=self.rejection(scorer, body, str(e))) from None

    def rejection(self, scorer: Scorer, body: bytes, reason: str) -> Notice | None:
        """A rejected Preference for the publisher, if the entry names a valid reply stream and its ids are
        strings (echoed even if they are outside their alphabet: `streams.sender`)."""
        sender = streams.sender(body, scorer.keys, "comparison_id")
        if sender is None:
            return None
        preference = Preference(
            run_id=sender.run_id,
            comparison_id=sender.id,
            step=sender.step,
            status=JudgeStatus.REJECTED,
            error=reason,
            judged_at=time.time(),
        )
        return Notice(sender.reply_to, preference, self.settings.reply_ttl_s)

    @staticmethod
    def event(comparison: Comparison, p: Preference) -> Event:
        kind = EventKind.COMPARISON_JUDGED if p.status is JudgeStatus.OK else EventKind(p.status)
        if p.status is not JudgeStatus.OK:
            detail = p.error or ""
        elif p.consistent is False:
            detail = p.justification
        else:
            detail = f"winner {p.winner}" + (f" (gatekeeper {p.gatekeeper})" if p.gatekeeper else "")
        return streams.event(
            SERVICE,
            kind,
            run_id=comparison.run_id,
            step=comparison.step,
            detail=detail,
            comparison_id=comparison.comparison_id,
            winner=p.winner,
            consistent=p.consistent,
            label=p.label,
            correct=p.correct,
            gatekeeper=p.gatekeeper,
            rubric_version=p.rubric_version,
            judge_ms=p.judge_ms,
        )


@dataclass
class Calls:
    """The pairwise judge calls made for one comparison (one per order that answered)."""

    completions: list[Completion[Any]] = field(default_factory=list)

    def usage(self, model: str) -> dict[str, int]:
        """What they add to the run's usage (common.usage)."""
        total: dict[str, int] = {}
        for c in self.completions:
            spent = usage.increments(
                pairwise.PAIRWISE,
                model,
                prompt_tokens=c.prompt_tokens,
                completion_tokens=c.completion_tokens,
                elapsed_s=c.elapsed_s,
            )
            for name, n in spent.items():
                total[name] = total.get(name, 0) + n
        return total
