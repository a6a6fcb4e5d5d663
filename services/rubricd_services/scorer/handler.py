"""The scorer's worker: one rollouts entry in, one committed Score out (or a dead letter).

The answering runtime (runtime.answering) takes the entry, answers a rollout scored before with its first
score (no judging) and commits; `prepare` gets the run's rubric set in force and, under the `alternating` policy,
the step's active meta-class (`schedule`), and asks the judge (`judges.scoring`; a verdict of the same call is
reused, `judges.cache`). The Score is committed with its effects and the call's usage in one step (`effects`).
A rollout that can never be scored as sent is rejected: it goes to the dead letters, and the trainer, if it said
where, gets a `rejected` score. Any other failure leaves the entry pending for a reclaim to retry.

Under group judging, a member of a sample group joins its group in Redis instead (`groups`); the group is
judged once, by the handler of the member that completes it or by a scorer's sweep at its deadline
(`judge_due_groups`), and each member's score committed as above.
"""

import logging
import time
from collections.abc import Sequence
from typing import Any

import msgspec
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.messages import Candidate, Event, EventKind, JudgeStatus, Rollout, RubricsUpdated, Score
from rubricd_services.judges.cache import VerdictCache
from rubricd_services.judges.caller import Tally, caller
from rubricd_services.judges.scoring import Judging, ReadySet, Scoring, judge_by, score_group, score_rollout
from rubricd_services.judges.verdicts import JUDGE
from rubricd_services.rubrics import generation
from rubricd_services.rubrics.policies import POLICIES
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.rubrics.sets import RubricCache
from rubricd_services.runtime.answering import ROLLOUTS, Answered, Answering, Prepared, Read
from rubricd_services.runtime.gathering import Retries
from rubricd_services.runtime.intake import Rejected, Sender, entry_id
from rubricd_services.runtime.service import Clients
from rubricd_services.state.rubric_sets import RubricStore
from rubricd_services.state.schedule import Schedule, rewarded

from . import effects
from .config import RunConfig
from .groups import Claimed, Groups
from .metrics import ScorerMetrics
from .settings import ScorerSettings

SERVICE = ROLLOUTS.service
RELOADS: Any = RubricsUpdated | Candidate  # what the scorer reloads its rubrics on (tagged: one decode)
log = logging.getLogger("rubricd.scorer")


class Scorer(Answering[Rollout, Score]):
    """Turns one rollouts entry into one committed Score."""

    def __init__(self, settings: ScorerSettings, clients: Clients) -> None:
        super().__init__(ROLLOUTS, effects.SCRIPT, settings, clients.redis, clients.keys)
        self.settings, self.llm = settings, clients.llm
        self.metrics = ScorerMetrics(clients.metrics)
        self.judge_settings = settings.agent(JUDGE)
        self.judging = Judging.of(settings, self.judge_settings)
        self.verdicts = VerdictCache(clients.redis, self.keys, settings.judge_cache_ttl_s)
        self.schedule = Schedule(
            clients.redis, self.keys, settings.schedule_rule(), settings.meta_classes, maxlen=settings.stream_maxlen
        )
        self.rubrics = RubricCache(
            RubricStore(clients.redis, self.keys),
            seeds=Seeds.load(settings),
            per_instance=settings.rubrics_mode == "per_instance",
            prepare=self.judging.prepare,
            generator=generation.generator(settings, clients, SERVICE) if settings.generate_rubrics else None,
        )
        self.groups = Groups(
            clients.redis,
            self.keys,
            clients.consumer,
            self.judge_group,
            Retries(settings.reclaim_idle_ms / 1000, settings.max_failures, settings.max_redeliveries),
            clients.outages,
            deadline_s=settings.group_deadline_s,
            lease_s=settings.reclaim_idle_ms / 1000,
            ttl_s=settings.answer_ttl_s,
        )

    async def handle(self, msg: RedisStreamMessage) -> None:
        rollout = self.take(msg.body)
        if RunConfig.of(rollout, self.settings).gathers(rollout):
            if await self.groups.gather(rollout, entry_id(msg)):  # False: to be judged alone
                return
        await self.respond(entry_id(msg), rollout)

    async def prepare(self, rollout: Rollout) -> Prepared[Score]:
        """Judge a rollout alone: its rubric set first, so that the judge cache's verdict is read with its stored
        score."""
        config = RunConfig.of(rollout, self.settings)
        rubrics = await self.rubrics.get(rollout)
        tally = Tally(JUDGE)
        # The verdict cache keeps one call's verdict: a set judged one call per rubric, or by votes, is judged
        # every time.
        one_call = self.judging.style.calls == "one" and config.votes == 1
        judge = self.verdicts.judge(
            judge_by(caller(self.llm, tally)), rubrics.set, self.judge_settings, rollout, on=one_call
        )
        reads = judge.ahead(rubrics.calls(rollout))

        async def answer(read: Sequence[Read]) -> Answered[Score]:
            judge.read(read)
            score = await score_rollout(
                rollout, await self.scoring(rollout, config, rubrics), judge, votes=config.votes
            )
            if judge.answered is not None:
                self.metrics.judge_cache.labels("hit" if judge.answered else "miss").inc()
            if judge.answered:
                score = msgspec.structs.replace(score, judge_cached=True)
            spent = tally.usage(self.judge_settings.model, cached=bool(judge.answered))
            return self.answered(rollout, score, spent, judge.keep)

        return Prepared(reads, answer)

    def answered(
        self, rollout: Rollout, score: Score, spent: dict[str, int], verdict: tuple[str, bytes] | None = None
    ) -> Answered[Score]:
        """The score with its event, usage and the scorer's own effects (`verdict`: a new one, for the judge
        cache)."""
        return Answered(
            score, event(rollout, score), spent, effects.values(self.keys, self.settings, rollout, score, verdict)
        )

    def rejected(self, sender: Sender, reason: str, rollout: Rollout | None = None) -> Score:
        """The answer to a rollout that can never be scored as sent (its ids are the sender's)."""
        return ROLLOUTS.rejection(Score, sender, reason, reward=None, rubric_version=0, scored_at=time.time())

    async def observe(self, rollout: Rollout, score: Score) -> None:
        self.metrics.observe(score)
        if self.settings.log_rollout_text:
            log.info(
                "scored %s/%s: reward %s (%s)\nprompt: %s\nresponse: %s",
                *(rollout.run_id, rollout.rollout_id, score.reward, score.status, rollout.prompt, rollout.response),
            )

    def refused(self, rollout: Rollout | None) -> None:
        self.metrics.scores.labels(JudgeStatus.REJECTED).inc()

    def check(self, rollout: Rollout) -> None:
        if rollout.reward_policy is not None and rollout.reward_policy not in POLICIES:
            raise Rejected(f"unknown reward_policy {rollout.reward_policy!r}; known: {sorted(POLICIES)}")

    async def scoring(self, rollout: Rollout, config: RunConfig, rubrics: ReadySet) -> Scoring:
        """How the rollout's verdicts become its Score: its policy, and the step's meta-class under `alternating`."""
        policy = config.reward_policy
        active = await self.active_class(rollout, rubrics) if policy == "alternating" else None
        return Scoring(rubrics, policy, active, self.settings.undefined_meta_class_reward)

    async def judge_due_groups(self) -> None:
        """Judge the groups due (at their deadline, or whose claim ran out), in this process."""
        await self.groups.sweep()

    async def judge_group(self, members: list[Rollout], claimed: Claimed) -> None:
        """Judge members of one group that share their prompt together, and commit each one's score."""
        head = members[0]
        config = RunConfig.of(head, self.settings)
        scoring = await self.scoring(head, config, await self.rubrics.get(head))
        tally = Tally(JUDGE)
        if claimed.given_up:
            error = "group judging never finished (max_failures failed judgings, or max_redeliveries scorers died)"
            scores = [failed(m, scoring, error) for m in members]
        else:
            judge = judge_by(caller(self.llm, tally))
            scores = await score_group(members, scoring, judge, group=claimed.key, votes=config.votes)
        spent = tally.usage(self.judge_settings.model)
        for i, (member, score) in enumerate(zip(members, scores, strict=True)):
            answered = self.answered(member, score, spent if i == 0 else {})  # its entry was acked when it joined
            try:
                await self.commit_answer(b"", member, answered)
            except Rejected as e:  # its reply_to names a key that is not a stream: stored and analysed, unanswered
                log.warning("rollout %s/%s: %s; its score is kept without a reply", member.run_id, member.rollout_id, e)
                await self.commit_answer(b"", msgspec.structs.replace(member, reply_to=None), answered)

    async def active_class(self, rollout: Rollout, rubrics: ReadySet) -> str | None:
        """The active meta-class of the rollout's step under `alternating` (None: the weighted total)."""
        decision = await self.schedule.active(
            rollout.run_id, rollout.step, rewarded(rubrics.set.rubrics, self.settings.meta_classes)
        )
        self.metrics.active(rollout.run_id, decision)
        return decision.meta_class

    async def on_rubrics_updated(self, msg: RedisStreamMessage) -> None:
        """Drop the cached set of the updated run (and instance), or of one whose candidate was put in shadow or
        rejected: its next rollout, of this step or a later one, loads the set anew."""
        update: RubricsUpdated | Candidate = wire.decode(msg.body, RELOADS)
        if (reloaded := self.rubrics.reload(update, SERVICE, "rollout")) is not None:
            await self.publish(reloaded)


def event(rollout: Rollout, score: Score) -> Event:
    """The event of a new score."""
    kind = EventKind.ROLLOUT_SCORED if score.status is JudgeStatus.OK else EventKind(score.status)
    fields = {"reward": score.reward, "rubric_version": score.rubric_version, "judge_ms": score.judge_ms}
    return ROLLOUTS.event(
        rollout, kind, score.error or "", **fields, **({"evaluation": True} if score.evaluation else {})
    )


def failed(rollout: Rollout, scoring: Scoring, error: str) -> Score:
    """A score whose judging failed for good, without a call."""
    return Score(
        run_id=rollout.run_id,
        rollout_id=rollout.rollout_id,
        step=rollout.step,
        status=JudgeStatus.JUDGE_FAILED,
        reward=None,
        rubric_version=scoring.rubrics.set.version,
        instance_key=scoring.rubrics.set.instance_key,
        policy=scoring.policy_name,
        error=error,
        scored_at=time.time(),
        group=rollout.group,
        evaluation=rollout.evaluation,
    )
