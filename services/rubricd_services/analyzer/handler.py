"""The analyzer's worker: one scored rollout in, one analysis in memory and announced (or a dead letter).

`handle` asks the analyst (`analysis`) about the rollout, writes the analysis
to memory, then announces it and acks the entry in one step (`effects`). An
analyst that fails leaves the entry pending for a reclaim to retry; once it is
given up on (dead-lettered), `given_up` tells the summarizer not to wait for
it: the step is summarized without it, naming the rollout as missing.

A rollout of a sample group may be analyzed only as part of a sample (`sampling`: the rollout's
`analysis_sample`, else the analyzers'): k per group are picked as they arrive, and an `extremes` group is
gathered in Redis and decided (`choose`, under the gathering's one claimant loop) by the analyzer that completes
it, or by any analyzer's `sweep` once its deadline passed or a claim on it lapsed. The rollouts left out cost no LLM call and are recorded so the
summarizer does not wait for them.
"""

import asyncio
import contextlib
import functools
import logging

import msgspec
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.messages import Event, EventKind, RolloutAnalysis, Rubric, ScoredRollout
from rubricd_services.llm import LLMError
from rubricd_services.llm.usage import Metered
from rubricd_services.memory.embedder import EMBEDDER
from rubricd_services.memory.store import MemoryItem, MemoryKind
from rubricd_services.runtime import events, intake, prompts
from rubricd_services.runtime.gathering import Claim, Claimant, Retries
from rubricd_services.runtime.outage import LLM, WEAVIATE
from rubricd_services.runtime.service import Clients
from rubricd_services.state.rubric_sets import RubricStore

from . import sampling
from .analysis import ANALYZER, AnalysisDraft, AnalysisFailed, analyze_rollout, render
from .effects import Effects, GroupRef
from .settings import AnalyzerSettings

SERVICE = "analyzer"
SWEEP_INTERVAL_S = 1.0  # how often undecided groups are checked for deadlines and lapsed claims
DUE_GROUPS = 100  # groups one sweep takes at most
RETRY_AFTER_S = 10.0  # a group whose decision failed is tried again after this
log = logging.getLogger("rubricd.analyzer")


class Analyzer:
    """Turns one scored-stream entry into one stored and announced analysis."""

    def __init__(self, settings: AnalyzerSettings, clients: Clients) -> None:
        self.settings = settings
        metrics = clients.metrics
        self.analyzed = metrics.counter(
            "rubricd_analyses", "rollouts analyzed: announced, or a repeat acked silently", ["outcome"]
        )
        self.left_out = metrics.counter(
            "rubricd_analyses_left_out", "scored rollouts the analysis sample left out: no LLM call, not waited for"
        )
        self.flagged = metrics.counter(
            "rubricd_analyses_flagging_hacking", "analyses that report reward-hacking evidence"
        )
        self.consumer = clients.consumer
        self.outages = clients.outages
        self.llm = Metered(clients.llm, clients.redis, clients.keys)
        self.memory = clients.memory
        self.store = RubricStore(clients.redis, clients.keys)
        lease_s = settings.handler_deadline([ANALYZER, EMBEDDER])  # a group's decision: its analyses at once
        deadline_s, maxlen = settings.group_deadline_s, settings.stream_maxlen
        self.effects = Effects(
            clients.redis, clients.keys, self.consumer, maxlen=maxlen, deadline_s=deadline_s, lease_s=lease_s
        )
        self.template = prompts.load(__package__, ANALYZER, settings.analyzer_prompt)
        self.prompt_chars = settings.agent(ANALYZER).prompt_chars()
        self._rubrics: dict[tuple[str, str | None, int], list[Rubric]] = {}
        self.samples = Claimant(
            self.effects.samples,
            self.choose,
            Retries(RETRY_AFTER_S, settings.max_failures, settings.max_redeliveries),
            clients.outages,
            describe=lambda name: f"analyzing sample group {GroupRef.parse(name)}",
            uses=(LLM, WEAVIATE),
        )

    async def handle(self, msg: RedisStreamMessage) -> None:
        scored = intake.decode(msg.body, ScoredRollout, "scored rollout")
        entry_id = intake.entry_id(msg)
        rule = sampling.rule(scored.rollout, self.settings.analysis_sample)
        if rule == sampling.EXTREMES:
            if await self.effects.gather(scored, msg.body, entry_id):
                self.samples.later(GroupRef.of(scored.rollout).name)
            return
        if isinstance(rule, int) and not await self.effects.pick(scored, rule, entry_id):
            self.left_out.inc()
            return
        analysis = await self.analyze(scored)
        await self.memory.put([memory_item(analysis)])
        first = await self.effects.announce(entry_id, analysis, self.event(analysis))
        self.count(analysis, first)

    async def analyze(self, scored: ScoredRollout) -> RolloutAnalysis:
        return await analyze_rollout(
            scored,
            await self.rubrics(scored),
            self.template,
            functools.partial(self.call_analyst, scored.rollout.run_id),
            max_chars=self.settings.max_text_chars,
            prompt_chars=self.prompt_chars,
        )

    def event(self, analysis: RolloutAnalysis) -> Event:
        return events.event(
            SERVICE,
            EventKind.ROLLOUT_ANALYZED,
            run_id=analysis.run_id,
            step=analysis.step,
            rollout_id=analysis.rollout_id,
            hacking=",".join(sorted({e.type for e in analysis.reward_hacking})),
            consumer=self.consumer,
        )

    def count(self, analysis: RolloutAnalysis, first: bool) -> None:
        self.analyzed.labels("announced" if first else "repeat").inc()
        if first and analysis.reward_hacking:
            self.flagged.inc()

    async def sweep(self) -> None:
        """Decide the groups that are due: past their deadline, or left by an analyzer that died deciding them."""
        await self.samples.sweep(limit=DUE_GROUPS)

    async def stop(self) -> None:
        await self.samples.stop()

    async def choose(self, claim: Claim, give_up: bool) -> None:
        """A claimed `extremes` group's decision: its best and worst analyzed, then announced with the rest left
        out, once; given up on, its chosen are named as such (the summary does not wait for them)."""
        group = GroupRef.parse(claim.name)
        members = {i: wire.decode(body, ScoredRollout) for i, body in claim.members.items()}
        chosen = [members[i] for i in sampling.extremes({i: s.score.reward for i, s in members.items()})]
        given_up: list[str] = []
        if give_up:
            given_up, chosen = [s.rollout.rollout_id for s in chosen], []
        analyses = list(await asyncio.gather(*(self.analyze(s) for s in chosen)))
        await self.memory.put([memory_item(a) for a in analyses])
        first = await self.effects.decide(group, analyses, [self.event(a) for a in analyses], given_up)
        for analysis in analyses:
            self.count(analysis, first)
        if first:
            self.left_out.inc(len(members) - len(analyses) - len(given_up))

    async def given_up(self, msg: RedisStreamMessage) -> None:
        """Before a scored rollout is dead-lettered: its step's summary need not wait for its analysis."""
        with contextlib.suppress(msgspec.DecodeError, msgspec.ValidationError):
            rollout = wire.decode(msg.body, ScoredRollout).rollout
            await self.effects.given_up(rollout.run_id, rollout.step, rollout.rollout_id)

    async def rubrics(self, scored: ScoredRollout) -> list[Rubric]:
        """The rubrics the score was given with (for their criteria); versions never change, so cached."""
        score = scored.score
        key = (score.run_id, score.instance_key, score.rubric_version)
        if key not in self._rubrics:
            found = await self.store.version(*key)
            if found is None:  # a rejected score, or a version since deleted: results still name ids
                return []
            self._rubrics[key] = found.rubrics
        return self._rubrics[key]

    async def call_analyst(
        self, run_id: str, messages: list[dict[str, str]], draft: type[AnalysisDraft]
    ) -> AnalysisDraft:
        try:
            return await self.llm.structured(run_id, ANALYZER, messages, draft)
        except LLMError as e:
            raise AnalysisFailed(str(e)) from e  # the cause says whether the endpoint was down


def memory_item(analysis: RolloutAnalysis) -> MemoryItem:
    return MemoryItem(
        kind=MemoryKind.ANALYSIS,
        run_id=analysis.run_id,
        step=analysis.step,
        text=render(analysis),
        ref=analysis.rollout_id,
        instance_key=analysis.instance_key,
        message=wire.encode(analysis),
    )
