"""The analyzer's worker: one scored rollout in, one analysis in memory and announced (or a dead letter).

`handle` asks the analyst (`analysis`) about the rollout, writes the analysis
to memory, then announces it and acks the entry in one step (`effects`). An
analyst that fails leaves the entry pending for a reclaim to retry; once it is
given up on (dead-lettered), `given_up` tells the summarizer not to wait for
it: the step is summarized without it, naming the rollout as missing.
"""

import contextlib
import functools

import msgspec
from faststream.redis.message import RedisStreamMessage

from rubricd import wire
from rubricd.keys import ANALYZERS
from rubricd.messages import EventKind, RolloutAnalysis, Rubric, ScoredRollout
from rubricd.store import RubricStore
from rubricd_services.common import events, intake, prompts
from rubricd_services.common.llm import LLMError
from rubricd_services.common.memory import MemoryItem, MemoryKind
from rubricd_services.common.service import Clients
from rubricd_services.common.usage import Metered

from .analysis import ANALYZER, AnalysisDraft, AnalysisFailed, analyze_rollout, render
from .effects import Effects
from .settings import AnalyzerSettings

SERVICE = "analyzer"


class Analyzer:
    """Turns one scored-stream entry into one stored and announced analysis."""

    def __init__(self, settings: AnalyzerSettings, clients: Clients) -> None:
        self.settings = settings
        metrics = clients.metrics
        self.analyzed = metrics.counter(
            "rubricd_analyses", "rollouts analyzed: announced, or a repeat acked silently", ["outcome"]
        )
        self.flagged = metrics.counter(
            "rubricd_analyses_flagging_hacking", "analyses that report reward-hacking evidence"
        )
        self.consumer = clients.consumer
        self.llm = Metered(clients.llm, clients.redis, clients.keys)
        self.memory = clients.memory
        self.store = RubricStore(clients.redis, clients.keys)
        self.effects = Effects(clients.redis, clients.keys, ANALYZERS, maxlen=settings.stream_maxlen)
        self.template = prompts.load(__package__, ANALYZER, settings.analyzer_prompt)
        self.prompt_chars = settings.agent(ANALYZER).prompt_chars()
        self._rubrics: dict[tuple[str, str | None, int], list[Rubric]] = {}

    async def handle(self, msg: RedisStreamMessage) -> None:
        scored = intake.decode(msg.body, ScoredRollout, "scored rollout")
        rubrics = await self.rubrics(scored)
        analysis = await analyze_rollout(
            scored,
            rubrics,
            self.template,
            functools.partial(self.call_analyst, scored.rollout.run_id),
            max_chars=self.settings.max_text_chars,
            prompt_chars=self.prompt_chars,
        )
        await self.memory.put([memory_item(analysis)])
        event = events.event(
            SERVICE,
            EventKind.ROLLOUT_ANALYZED,
            run_id=analysis.run_id,
            step=analysis.step,
            rollout_id=analysis.rollout_id,
            hacking=",".join(sorted({e.type for e in analysis.reward_hacking})),
            consumer=self.consumer,
        )
        first = await self.effects.announce(intake.entry_id(msg), analysis, event)
        self.analyzed.labels("announced" if first else "repeat").inc()
        if first and analysis.reward_hacking:
            self.flagged.inc()

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
