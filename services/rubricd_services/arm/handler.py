"""The arm service's worker: one ArmRollout in, one committed ArmReward out (or a dead letter).

`handle` validates the rollout, checks its phase against what its step trains (`phases`), and rewards it
(`rewards`): a generator rollout by having the frozen judge compare its prompt's labelled pairs, in both orders,
under the rubric set it generated (nothing cached across sets); a judge rollout by reading its verdict against
the label (no LLM call). The reward, its event, the reply and the calls' usage are committed in one step
(runtime.answering). A rollout that can never be rewarded as sent (malformed, of the phase its step does not train, naming
a prompt or comparison the run has not imported, or a generator whose rubrics were never written) is rejected:
it goes to the dead letters, and the trainer gets a `rejected` reward naming why.
"""

import asyncio
import logging
import time
from typing import Any

import msgspec

from rubricd.messages import ArmReward, ArmRollout, Event, EventKind, JudgeStatus
from rubricd_services.judges import pairwise
from rubricd_services.judges.caller import Tally, caller
from rubricd_services.judges.pairwise import PAIRWISE
from rubricd_services.judges.scoring import Judging
from rubricd_services.rubrics import generation
from rubricd_services.rubrics.seeds import Seeds
from rubricd_services.runtime import answering
from rubricd_services.runtime.answering import ARM_ROLLOUTS, Answered, Answering
from rubricd_services.runtime.intake import Sender
from rubricd_services.runtime.service import Clients
from rubricd_services.state import arm
from rubricd_services.state.arm import Phases, explain

from . import rewards
from .settings import ArmSettings

SERVICE = ARM_ROLLOUTS.service
log = logging.getLogger("rubricd.arm")


class Rewarder(Answering[ArmRollout, ArmReward]):
    """Turns one arm entry into one committed ArmReward."""

    def __init__(self, settings: ArmSettings, clients: Clients) -> None:
        super().__init__(ARM_ROLLOUTS, SCRIPT, settings, clients.redis, clients.keys)
        self.settings, self.llm = settings, clients.llm
        self.judging = Judging.pairwise(settings, settings.agent(PAIRWISE))
        self.anchors = generation.anchors(Seeds.load(settings).default)
        self.phases = Phases(clients.redis, clients.keys, settings.plan(), maxlen=settings.stream_maxlen)
        self.rewards = clients.metrics.counter(
            "rubricd_arm_rewards",
            "Rubric-ARM rollouts rewarded, by phase and outcome (rewarded, penalized, judge_failed, rejected)",
            ["phase", "outcome"],
        )

    async def answer(self, rollout: ArmRollout) -> Answered[ArmReward]:
        tally = Tally(PAIRWISE)
        judge_model = rollout.judge_model or self.judging.llm.model  # the frozen judge: the rollout's, else the agent's
        reward = await self.reward(rollout, tally, judge_model)
        return Answered(reward, event(rollout, reward), tally.usage(judge_model))

    def rejected(self, sender: Sender, reason: str, rollout: ArmRollout | None = None) -> ArmReward:
        """The answer to an arm rollout that can never be rewarded as sent (its ids are the sender's; its phase the
        rollout's, when it was valid)."""
        phase = rollout.phase if rollout is not None else None
        return ARM_ROLLOUTS.rejection(ArmReward, sender, reason, phase=phase, rewarded_at=time.time())

    async def observe(self, rollout: ArmRollout, reward: ArmReward) -> None:
        outcome = "penalized" if reward.penalty else "rewarded" if reward.status is JudgeStatus.OK else reward.status
        self.rewards.labels(reward.phase or "none", outcome).inc()

    def refused(self, rollout: ArmRollout | None) -> None:
        self.rewards.labels(rollout.phase if rollout is not None else "none", "rejected").inc()

    async def reward(self, rollout: ArmRollout, tally: Tally, judge_model: str) -> ArmReward:
        decision = await self.phases.decision(rollout.run_id, rollout.step)
        if not decision.admits(rollout.phase):
            raise self.intake.refuse(
                rollout,
                f"step {rollout.step} trains the {decision.training} ({explain(decision)}): a {rollout.phase} "
                "rollout is not rewarded in it",
            )
        started = time.perf_counter()
        if rollout.phase == "generator":
            reward = await self.generator(rollout, tally, judge_model)
        else:
            reward = await self.judge(rollout)
        ms = round((time.perf_counter() - started) * 1000, 3)
        return msgspec.structs.replace(reward, reward_ms=ms, rewarded_at=time.time())

    async def generator(self, rollout: ArmRollout, tally: Tally, judge_model: str) -> ArmReward:
        """The frozen judge's (`judge_model`) accuracy on the prompt's labelled pairs with the rubric set the
        generator wrote."""
        s = self.settings
        assert rollout.prompt_id is not None
        found = await arm.read_prompt(self.redis, self.keys, rollout.run_id, rollout.prompt_id)
        if found is None:
            raise self.intake.refuse(
                rollout, f"run has no preference prompt {rollout.prompt_id!r} (rubricd arm import)"
            )
        base = _base(rollout, judge_model=judge_model)
        generated = rewards.generated(
            rollout.completion, self.anchors, s.meta_classes, s.generate_max_rubrics, s.generate_max_points
        )
        if generated.problem is not None:
            return ArmReward(**base, status=JudgeStatus.OK, reward=s.arm_invalid_reward, penalty=generated.problem)
        rubric_set = rewards.shown_set(rollout.run_id, found.prompt_id, generated.rubrics)
        system = pairwise.system_message(self.judging.template, rubric_set)
        judge = pairwise.judge_by(caller(self.llm, tally, model=judge_model))
        judged = await asyncio.gather(
            *(
                pairwise.judge_comparison(
                    comparison,
                    rubric_set,
                    system,
                    judge,
                    both_orders=True,
                    ties=s.pairwise_ties,
                    max_chars=self.judging.llm.prompt_chars(),
                )
                for comparison in found.comparisons[: s.arm_max_comparisons]
            )
        )
        outcomes = [rewards.outcome(p, s.arm_tie_reward) for p in judged]
        value = rewards.generator_reward(outcomes)
        failed = [o.error for o in outcomes if o.credit is None]
        return ArmReward(
            **base,
            status=JudgeStatus.OK if value is not None else JudgeStatus.JUDGE_FAILED,
            reward=value,
            error=f"the judge answered none of {len(outcomes)} comparisons: {failed[0]}" if value is None else None,
            rubrics=generated.rubrics,
            dropped=generated.dropped,
            outcomes=outcomes,
            judged=len(outcomes) - len(failed),
            correct=sum(1 for o in outcomes if o.winner is not None and o.winner == o.label),
        )

    async def judge(self, rollout: ArmRollout) -> ArmReward:
        """The judge's verdict against the label, under the frozen generator's rubrics it was shown."""
        s = self.settings
        assert rollout.comparison_id is not None and rollout.generator_model is not None
        indexed = await arm.read_comparison(self.redis, self.keys, rollout.run_id, rollout.comparison_id)
        if indexed is None:
            raise self.intake.refuse(rollout, f"run has no comparison {rollout.comparison_id!r} (rubricd arm import)")
        found, comparison = indexed
        shown = await arm.read_frozen_set(
            self.redis, self.keys, rollout.run_id, rollout.generator_model, found.prompt_id
        )
        if shown is None:
            raise self.intake.refuse(
                rollout,
                f"no rubrics of generator {rollout.generator_model!r} for prompt {found.prompt_id!r}: `rubricd arm "
                f"dataset {rollout.run_id} --phase judge --generator {rollout.generator_model}` writes them, with the "
                "judge's prompts",
            )
        base = _base(rollout, prompt_id=found.prompt_id, label=comparison.label)
        read = rewards.verdict(rollout.completion, shown, rollout.order, ties=s.pairwise_ties)
        if read.judgment is None:
            return ArmReward(**base, status=JudgeStatus.OK, reward=s.arm_invalid_reward, penalty=read.problem)
        return ArmReward(
            **base,
            status=JudgeStatus.OK,
            reward=rewards.judge_reward(read.judgment, comparison),
            winner=read.judgment.winner,
        )


def event(rollout: ArmRollout, reward: ArmReward) -> Event:
    """The event of a new reward."""
    if reward.status is not JudgeStatus.OK:
        kind, detail = EventKind(reward.status), reward.error or ""
    elif reward.penalty is not None:
        kind, detail = EventKind.ARM_REWARDED, f"penalty: {reward.penalty}"
    elif reward.phase == "generator":
        kind, detail = EventKind.ARM_REWARDED, f"{reward.correct} of {reward.judged} comparisons picked right"
    else:
        kind, detail = EventKind.ARM_REWARDED, f"verdict {reward.winner}, label {reward.label}"
    return ARM_ROLLOUTS.event(
        rollout,
        kind,
        detail,
        phase=reward.phase,
        reward=reward.reward,
        penalized=reward.penalty is not None,
        judge_model=reward.judge_model,
        generator_model=reward.generator_model,
    )


def _base(rollout: ArmRollout, **fields: Any) -> dict[str, Any]:
    """The fields every reward of `rollout` carries."""
    return {
        "run_id": rollout.run_id,
        "rollout_id": rollout.rollout_id,
        "step": rollout.step,
        "phase": rollout.phase,
        "prompt_id": rollout.prompt_id,
        "comparison_id": rollout.comparison_id,
        "order": rollout.order if rollout.phase == "judge" else None,
        "judge_model": rollout.judge_model,
        "generator_model": rollout.generator_model,
        **fields,
    }


SCRIPT = answering.script()  # the runtime's commit, with no key of the arm's own
