"""The scorer's worker: one rollouts entry in, one committed Score out (or a dead letter).

`handle` validates the entry, answers a rollout scored before with its first
score (no judging), gets the run's rubric set in force and, under
the `alternating` policy, the step's active meta-class (`schedule`), asks the
judge (`judges.scoring`; a verdict of the same call is reused, `cache`), and
commits the score with its effects and the call's usage in one step (`effects`). A
rollout that can never be scored as sent is rejected: it goes to the dead
letters, and the trainer, if it said where, gets a `rejected` score. Any other
failure leaves the entry pending for a reclaim to retry.

Under group judging, a member of a sample group joins its group in Redis instead (`groups`); the group is
judged once, by the handler of the member that completes it or by a scorer's sweep at its deadline
(`judge_due_groups`), and each member's score committed as above.
"""

import asyncio
import logging
import time
from dataclasses import dataclass, field

import msgspec
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.keys import SCORERS
from rubricd.messages import Event, EventKind, JudgeStatus, Rollout, RubricsUpdated, Score, instance_key
from rubricd.reward import POLICIES, policy
from rubricd.store import RubricStore
from rubricd_services.common import events, intake, prompts
from rubricd_services.common.intake import Rejected
from rubricd_services.common.keeping import Keeping
from rubricd_services.common.metrics import Metrics
from rubricd_services.common.seeds import Seeds
from rubricd_services.common.service import Clients
from rubricd_services.judges import verdicts
from rubricd_services.judges.caller import Tally, caller
from rubricd_services.judges.groups import GROUP
from rubricd_services.judges.scoring import (
    TRAJECTORY,
    Judge,
    Rubrics,
    judge_by,
    preparer,
    score_group,
    score_rollout,
)
from rubricd_services.judges.verdicts import JUDGE
from rubricd_services.rubrics import generation
from rubricd_services.rubrics.sets import RubricCache

from . import cache
from .cache import JudgeCache
from .effects import Effects
from .groups import Claimed, Gathering
from .schedule import Decision, Schedule, candidates
from .settings import ScorerSettings

SERVICE = "scorer"
log = logging.getLogger("rubricd.scorer")
DUE_GROUPS = 16  # groups one sweep claims at most

JUDGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64)
REWARD_BUCKETS = tuple(i / 10 for i in range(11))


class ScorerMetrics:
    """The scorer's own figures, beside FastStream's and the LLM client's."""

    def __init__(self, metrics: Metrics) -> None:
        self.scores = metrics.counter(
            "rubricd_scores", "rollouts scored, by status (ok, judge_failed, rejected)", ["status"]
        )
        self.judge_seconds = metrics.histogram(
            "rubricd_judge_seconds", "judge latency, retries included", JUDGE_BUCKETS
        )
        self.reward = metrics.histogram("rubricd_reward", "rewards given (status ok)", REWARD_BUCKETS)
        self.scored_rubric_version = metrics.gauge(
            "rubricd_scored_rubric_version",
            "the rubric version the run's latest score (this scorer's) was judged under (global sets)",
            ["run_id"],
        )
        self.judge_cache = metrics.counter(
            "rubricd_judge_cache", "verdicts given, by result: hit (reused), miss (the judge was asked)", ["result"]
        )
        self.active_meta_class = metrics.gauge(
            "rubricd_active_meta_class",
            "alternating rewards: 1 for the active meta-class of the run's latest step this scorer scored "
            "(weighted_total: none, the weighted total is the reward), 0 for the classes active before it",
            ["run_id", "meta_class"],
        )
        self._active: dict[str, tuple[int, str]] = {}  # run -> (its latest step seen, that step's class)

    def observe(self, score: Score) -> None:
        self.scores.labels(score.status).inc()
        if score.judge_ms is not None:
            self.judge_seconds.observe(score.judge_ms / 1000)
        if score.reward is not None:
            self.reward.observe(score.reward)
        if score.instance_key is None:  # per-instance sets would make one series per prompt
            self.scored_rubric_version.labels(score.run_id).set(score.rubric_version)

    def active(self, run_id: str, decision: Decision) -> None:
        latest = self._active.get(run_id)
        if latest is not None and latest[0] >= decision.step:
            return
        name = decision.meta_class or "weighted_total"
        if latest is not None:
            self.active_meta_class.labels(run_id, latest[1]).set(0)
        self.active_meta_class.labels(run_id, name).set(1)
        self._active[run_id] = (decision.step, name)


class Scorer:
    """Turns one rollouts entry into one committed Score."""

    def __init__(self, settings: ScorerSettings, clients: Clients) -> None:
        self.settings = settings
        self.metrics = ScorerMetrics(clients.metrics)
        self.keys = clients.keys
        self.redis = clients.redis
        self.llm = clients.llm
        self.judge_settings = settings.agent(JUDGE)
        self.cache = JudgeCache(settings.judge_cache_ttl_s)
        self.schedule = Schedule(
            clients.redis, self.keys, settings.schedule_rule(), settings.meta_classes, maxlen=settings.stream_maxlen
        )
        template = prompts.load(verdicts.__package__, JUDGE, settings.judge_prompt)
        for_trajectories = prompts.load(verdicts.__package__, TRAJECTORY, settings.judge_trajectory_prompt)
        for_groups = prompts.load(verdicts.__package__, GROUP, settings.judge_group_prompt)
        self.rubrics = RubricCache(
            RubricStore(clients.redis, self.keys),
            seeds=Seeds.load(settings),
            per_instance=settings.rubrics_mode == "per_instance",
            prepare=preparer(
                template,
                self.judge_settings.prompt_chars(),
                settings.judge_style(),
                for_trajectories,
                settings.judge_reasoning,
                for_groups,
                settings.judge_group_members,
                self.judge_settings.max_tokens,
            ),
            generator=generation.generator(settings, clients, SERVICE) if settings.generate_rubrics else None,
        )
        self.intake = intake.Intake(
            Rollout,
            "rollout",
            "rollout_id",
            settings.max_rollout_bytes,
            "max_rollout_bytes",
            self.keys,
            settings.reply_ttl_s,
            answer=rejected,
            check=known_policy,
        )
        self.effects = Effects(
            clients.redis,
            self.keys,
            SCORERS,
            Keeping.of(settings, settings.stream_maxlen),
            stats_ttl_s=settings.schedule_stats_ttl_s,
            verdict_ttl_s=settings.judge_cache_ttl_s,
        )

        self.gathering = Gathering(
            clients.redis,
            self.keys,
            SCORERS,
            clients.consumer,
            deadline_s=settings.group_deadline_s,
            lease_s=settings.reclaim_idle_ms / 1000,
            ttl_s=settings.answer_ttl_s,
        )

    async def handle(self, msg: RedisStreamMessage) -> None:
        rollout = self.take(msg.body)
        if (rollout.judge_mode or self.settings.judge_mode) == "group" and rollout.group and rollout.group_size != 1:
            if await self.gather(rollout, intake.entry_id(msg)):
                return
        await self.score_alone(rollout, intake.entry_id(msg))

    async def score_alone(self, rollout: Rollout, entry_id: bytes) -> None:
        rubrics = await self.rubrics.get(rollout)
        votes = rollout.judge_votes or self.settings.judge_votes
        # The verdict cache keeps one call's verdict: a set judged one call per rubric, or by votes, is judged
        # every time.
        messages, digest = None, None
        if self.settings.judge_cache_ttl_s and self.settings.judge_calls == "one" and votes == 1:
            [call] = rubrics.judging(rollout)
            messages = call.messages(rollout)
            digest = cache.digest(rubrics.set, self.judge_settings, messages, rollout)
        first, kept = await self.lookup(rollout, digest)
        if first is not None:
            # Scored before (published again, a retried request): its first score again, without judging it.
            score = wire.decode(first, Score)
            await self.effects.commit(entry_id, rollout, score, self.event(rollout, score), {})
            log.info(
                "rollout %s/%s was already scored; replied with its first score", rollout.run_id, rollout.rollout_id
            )
            return
        policy_name = rollout.reward_policy or self.settings.reward_policy
        active = await self.active_class(rollout, rubrics) if policy_name == "alternating" else None
        judged = Judged()
        score = await score_rollout(
            rollout,
            rubrics,
            self.judge(digest, kept, judged),
            policy(policy_name),
            policy_name,
            active=active,
            messages=messages,
            undefined=self.settings.undefined_meta_class_reward,
            votes=votes,
        )
        if judged.tally.cached:
            score = msgspec.structs.replace(score, judge_cached=True)
        spent = judged.tally.usage(self.judge_settings.model)
        await self.commit(entry_id, rollout, score, spent, judged.keep)

    async def commit(
        self,
        entry_id: bytes,
        rollout: Rollout,
        score: Score,
        spent: dict[str, int],
        verdict: tuple[str, bytes] | None = None,
    ) -> None:
        """Commit a new score (effects.Effects.commit); `entry_id` b"": the entry was acked when it joined its
        group."""
        analyze = not rollout.evaluation or self.settings.analyze_evaluation
        event = self.event(rollout, score)
        committed = await self.effects.commit(entry_id, rollout, score, event, spent, analyze=analyze, verdict=verdict)
        if not committed:
            log.info(
                "rollout %s/%s was already scored; replied with its first score", rollout.run_id, rollout.rollout_id
            )
            return
        self.metrics.observe(score)
        if self.settings.log_rollout_text:
            log.info(
                "scored %s/%s: reward %s (%s)\nprompt: %s\nresponse: %s",
                *(rollout.run_id, rollout.rollout_id, score.reward, score.status, rollout.prompt, rollout.response),
            )

    async def gather(self, rollout: Rollout, entry_id: bytes) -> bool:
        """Group judging: a member joins its group (its entry acked), and the group is judged if it completes it;
        False if the member is to be judged alone (scored before: its first score again; or its group's judging
        started: a late member)."""
        first = await self.redis.get(self.keys.score(rollout.run_id, rollout.rollout_id))
        if first is not None:
            return False  # scored before: score_alone replies with its first score
        members = await self.gathering.join(rollout, entry_id)
        if members is None:
            log.info("rollout %s/%s came after its group was judged; judged alone", rollout.run_id, rollout.rollout_id)
            return False
        if rollout.group_size is not None and members >= rollout.group_size:
            await self.judge_due(self.gathering.key(rollout))
        return True

    async def judge_due_groups(self) -> None:
        """Judge the groups due (at their deadline, or whose claim ran out), in this process."""
        due = await self.gathering.due(DUE_GROUPS)
        for key, outcome in zip(due, await asyncio.gather(*(self.judge_due(k) for k in due), return_exceptions=True)):
            if isinstance(outcome, Exception):  # the group falls due again when its claim runs out
                log.warning("judging group %s failed: %r", key, outcome)

    async def judge_due(self, key: str) -> None:
        """Claim the group at `key` if it is due, judge its members still without a score, and finish it."""
        claimed = await self.gathering.claim(key)
        if claimed is None:
            return
        async with self.gathering.held(key):
            keys = [self.keys.score(m.run_id, m.rollout_id) for m in claimed.members]
            scored = await self.redis.mget(keys) if keys else []
            todo = [m for m, first in zip(claimed.members, scored, strict=True) if first is None]
            for part in _parts(todo):
                await self.judge_group(part, claimed)
            await self.gathering.finish(key)

    async def judge_group(self, members: list[Rollout], claimed: Claimed) -> None:
        """Judge members of one group that share their prompt together, and commit each one's score."""
        head = members[0]
        rubrics = await self.rubrics.get(head)
        policy_name = head.reward_policy or self.settings.reward_policy
        active = await self.active_class(head, rubrics) if policy_name == "alternating" else None
        judged = Judged()
        if claimed.claims > self.settings.max_failures:
            error = f"group judging was claimed {claimed.claims} times and never finished (max_failures)"
            scores = [failed(m, rubrics, policy_name, error) for m in members]
        else:
            scores = await score_group(
                members,
                rubrics,
                judge_by(caller(self.llm, judged.tally)),
                policy(policy_name),
                policy_name,
                group=claimed.key,
                active=active,
                undefined=self.settings.undefined_meta_class_reward,
                votes=head.judge_votes or self.settings.judge_votes,
            )
        spent = judged.tally.usage(self.judge_settings.model)
        for i, (member, score) in enumerate(zip(members, scores, strict=True)):
            try:
                await self.commit(b"", member, score, spent if i == 0 else {})
            except Rejected as e:  # its reply_to names a key that is not a stream: stored and analysed, unanswered
                log.warning("rollout %s/%s: %s; its score is kept without a reply", member.run_id, member.rollout_id, e)
                await self.commit(b"", msgspec.structs.replace(member, reply_to=None), score, spent if i == 0 else {})

    async def active_class(self, rollout: Rollout, rubrics: Rubrics) -> str | None:
        """The active meta-class of the rollout's step under `alternating` (None: the weighted total)."""
        decision = await self.schedule.active(
            rollout.run_id, rollout.step, candidates(rubrics.set.rubrics, self.settings.meta_classes)
        )
        self.metrics.active(rollout.run_id, decision)
        return decision.meta_class

    async def on_rubrics_updated(self, msg: RedisStreamMessage) -> None:
        """Drop the cached set of the updated run (and instance): its next rollout loads the new version."""
        reloaded = self.rubrics.reload(wire.decode(msg.body, RubricsUpdated), SERVICE, "rollout")
        if reloaded is not None:
            await self.redis.xadd(
                self.keys.events, wire.entry(reloaded), maxlen=self.settings.stream_maxlen, approximate=True
            )

    def take(self, body: bytes) -> Rollout:
        """The rollout, or Rejected (counted, and with a rejected Score for the trainer if it said where)."""
        try:
            return self.intake.take(body)
        except Rejected:
            self.metrics.scores.labels(JudgeStatus.REJECTED).inc()
            raise

    async def lookup(self, rollout: Rollout, digest: str | None) -> tuple[bytes | str | None, bytes | str | None]:
        """What Redis holds before judging, in one round trip: the rollout's first score, and the verdict kept
        for its judge call (`digest`; None: the cache is off)."""
        score = self.keys.score(rollout.run_id, rollout.rollout_id)
        if digest is None:
            return await self.redis.get(score), None
        first, kept = await self.redis.mget([score, self.keys.verdict(digest)])
        return first, kept

    def judge(self, digest: str | None, kept: bytes | str | None, judged: "Judged") -> Judge:
        """The judge of one rollout: the verdict kept for the same call (`digest`, read as `kept`), or the one
        this process is making for a twin, else the LLM's (then kept); `judged` says which, and what it used."""
        ask = judge_by(caller(self.llm, judged.tally))

        async def call(messages: list[dict[str, str]], verdict: type[msgspec.Struct]) -> msgspec.Struct:
            if digest is None:
                return await ask(messages, verdict)
            value, judged.tally.cached = await self.cache.verdict(digest, verdict, kept, lambda: ask(messages, verdict))
            self.metrics.judge_cache.labels("hit" if judged.tally.cached else "miss").inc()
            if not judged.tally.cached:
                judged.keep = (self.keys.verdict(digest), cache.encode(value))  # kept by the score's commit
            return value

        return call

    @staticmethod
    def event(rollout: Rollout, score: Score) -> Event:
        kind = EventKind.ROLLOUT_SCORED if score.status is JudgeStatus.OK else EventKind(score.status)
        return events.event(
            SERVICE,
            kind,
            run_id=rollout.run_id,
            step=rollout.step,
            rollout_id=rollout.rollout_id,
            detail=score.error or "",
            reward=score.reward,
            rubric_version=score.rubric_version,
            judge_ms=score.judge_ms,
            **({"evaluation": True} if score.evaluation else {}),
        )


def rejected(sender: intake.Sender, reason: str, rollout: Rollout | None = None) -> Score:
    """The answer to a rollout that can never be scored as sent (its ids are the sender's)."""
    return Score(
        run_id=sender.run_id,
        rollout_id=sender.id,
        step=sender.step,
        status=JudgeStatus.REJECTED,
        reward=None,
        rubric_version=0,
        error=reason,
        scored_at=time.time(),
    )


def failed(rollout: Rollout, rubrics: Rubrics, policy_name: str, error: str) -> Score:
    """A score whose judging failed for good, without a call."""
    return Score(
        run_id=rollout.run_id,
        rollout_id=rollout.rollout_id,
        step=rollout.step,
        status=JudgeStatus.JUDGE_FAILED,
        reward=None,
        rubric_version=rubrics.set.version,
        instance_key=rubrics.set.instance_key,
        policy=policy_name,
        error=error,
        scored_at=time.time(),
        group=rollout.group,
        evaluation=rollout.evaluation,
    )


def _parts(members: list[Rollout]) -> list[list[Rollout]]:
    """The members split by what they are judged against: their prompt (instance), text or trajectory."""
    parts: dict[tuple[str, bool], list[Rollout]] = {}
    for member in members:
        parts.setdefault((instance_key(member), bool(member.trajectory)), []).append(member)
    return list(parts.values())


def known_policy(rollout: Rollout) -> None:
    if rollout.reward_policy is not None and rollout.reward_policy not in POLICIES:
        raise Rejected(f"unknown reward_policy {rollout.reward_policy!r}; known: {sorted(POLICIES)}")


@dataclass
class Judged:
    """How one rollout was judged: its calls (or the cache: `tally.cached`), and the verdict key and value the
    score's commit keeps (a new verdict, with the cache on)."""

    tally: Tally = field(default_factory=lambda: Tally(JUDGE))
    keep: tuple[str, bytes] | None = None
