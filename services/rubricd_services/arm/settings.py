"""The arm service's settings, and what `rubricd arm dataset` reads of them (env prefix RUBRICD_, see settings)."""

from typing import ClassVar, Literal

from pydantic import Field

from rubricd.messages import Plan
from rubricd_services.judges.settings import PairwiseSettings
from rubricd_services.rubrics.seeds import SeedSettings
from rubricd_services.rubrics.settings import GeneratorSettings
from rubricd_services.settings import AnswerSettings, Count, InFlight, KeptMaxlen, KeptTTL, ServiceSettings, Share


class ArmSettings(ServiceSettings, AnswerSettings, SeedSettings, GeneratorSettings, PairwiseSettings):
    renamed = {
        "RUBRICD_ARM_REWARD_TTL_S": "RUBRICD_ANSWER_TTL_S",
        "RUBRICD_ARM_KEPT_MAXLEN": "RUBRICD_KEPT_MAXLEN",
        "RUBRICD_ARM_KEPT_TTL_S": "RUBRICD_KEPT_TTL_S",
    }
    max_in_flight: InFlight = 8  # a generator rollout is up to 2 x arm_max_comparisons judge calls
    arm_first_phase: Literal["generator", "judge"] = Field(
        "judge", description="the phase a run starts in (Rubric-ARM trains the judge first)"
    )
    arm_phase_steps: Count = Field(10, description="steps of each phase before the other model trains")
    arm_warm_up_steps: int = Field(
        0, ge=0, description="steps of the first phase before the alternation starts (added to its first turn)"
    )
    arm_simultaneous: bool = Field(
        False, description="reward both phases every step (simultaneous updates, the baseline alternation beats)"
    )
    arm_invalid_reward: float = Field(
        -1.0,
        description="the reward of a completion that cannot be used: a generated rubric set that breaks the "
        "generation rules (no valid rubric), or a judge verdict that does not parse",
    )
    arm_tie_reward: Share = Field(
        0.0,
        description="what a comparison judged a tie in both orders adds to the generator's reward (1: a right "
        "pick; 0.5 makes a set that cannot separate a pair worth a coin toss)",
    )
    arm_max_comparisons: int = Field(
        8, ge=1, le=64, description="labelled comparisons of the prompt a generator rollout is judged on (the first)"
    )
    max_arm_rollout_bytes: int = Field(1_000_000, ge=1024, description="a larger arm rollout is rejected")
    kept_maxlen: KeptMaxlen = Field(
        100_000, description="rewarded rollouts kept per run for `rubricd export` (<ns>:arm-rewarded:<run>); 0: none"
    )
    kept_ttl_s: KeptTTL = Field(
        30 * 24 * 3600, description="a run's kept rewarded rollouts expire this long after the last one"
    )

    def plan(self) -> Plan:
        """A run's phase plan unless it has its own (`rubricd arm phases`)."""
        return Plan(
            first=self.arm_first_phase,
            phase_steps=self.arm_phase_steps,
            warm_up_steps=self.arm_warm_up_steps,
            simultaneous=self.arm_simultaneous,
        )


class DatasetSettings(ServiceSettings, SeedSettings, GeneratorSettings, PairwiseSettings):
    """What `rubricd arm dataset` reads of the arm service's settings: the seeds, the generator's and the pairwise
    judge's."""

    read_by: ClassVar[str] = "cli"  # the process that reads them (the settings reference's "Read by")
