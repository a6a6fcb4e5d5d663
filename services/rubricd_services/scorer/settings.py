"""The scorer's settings (env prefix RUBRICD_, see settings)."""

from pydantic import Field, field_validator

from rubricd_services.judges.settings import CanarySettings, JudgeSettings
from rubricd_services.rubrics.policies import POLICIES, Undefined
from rubricd_services.rubrics.seeds import SeedSettings
from rubricd_services.rubrics.settings import GeneratorSettings, PromotionSettings
from rubricd_services.settings import (
    AnswerSettings,
    Count,
    Duration,
    InFlight,
    KeptMaxlen,
    KeptTTL,
    ReadSize,
    ServiceSettings,
)
from rubricd_services.state.schedule import Rule, Strategy


class ScorerSettings(
    ServiceSettings, AnswerSettings, SeedSettings, GeneratorSettings, JudgeSettings, CanarySettings, PromotionSettings
):
    renamed = {
        "RUBRICD_SCORE_TTL_S": "RUBRICD_ANSWER_TTL_S",
        "RUBRICD_RECORD_MAXLEN": "RUBRICD_KEPT_MAXLEN",
        "RUBRICD_RECORD_TTL_S": "RUBRICD_KEPT_TTL_S",
    }
    max_in_flight: InFlight = 256
    max_records: ReadSize = 32
    max_rollout_bytes: int = Field(
        1_000_000, ge=1024, description="a larger rollout is dead-lettered (and answered rejected)"
    )
    reward_policy: str = Field(
        "weighted_sum",
        description="weighted_sum: the reward is the weighted total; alternating: the score of the step's active "
        "meta-class alone (ARL-RR)",
    )
    undefined_meta_class_reward: Undefined = Field(
        "weighted_total",
        description="alternating, when the active meta-class has no positive-point rubric for a rollout: "
        "weighted_total (the reward is the weighted total) or mask (no reward, the Score says masked)",
    )
    schedule_strategy: Strategy = Field(
        "round_robin",
        description="alternating: how a step's meta-class is chosen, round_robin (the declared order), most_room "
        "(the lowest recent mean) or largest_gain (the largest rise of the recent mean)",
    )
    warmup_steps: int = Field(
        0, ge=0, description="alternating: the first N decided steps of a run get the weighted total"
    )
    min_phase_steps: Count = Field(1, description="alternating: decided steps a meta-class stays active at least")
    schedule_window_steps: Count = Field(
        3,
        description="alternating, most_room and largest_gain: the recent mean is over the last N decided steps "
        "(largest_gain: minus the mean over the N before them)",
    )
    schedule_stats_ttl_s: int = Field(
        7 * 24 * 3600,
        ge=60,
        description="a step's per-class statistics (alternating: what the schedule reads, `rubricd schedule` shows) "
        "and its rubric health (`rubricd rubrics health`) are kept this long after its last score; about 0.5 KB "
        "per step, and about 60 bytes per sample group and rubric",
    )
    kept_maxlen: KeptMaxlen = Field(
        20_000,
        description="each run's last N scored rollouts are kept with their first scores, for `rubricd rescore` "
        "(<ns>:recorded:<run>: about the rollout's text plus 1 KB each); 0: none",
    )
    kept_ttl_s: KeptTTL = Field(
        7 * 24 * 3600, description="a run's kept rollouts (and its canaries) expire this long after its last score"
    )
    analyze_evaluation: bool = Field(
        False,
        description="evaluation rollouts (Rollout.evaluation) go to the analyzers too, into the memory loop; "
        "default: they are scored only",
    )
    group_deadline_s: Duration = Field(
        30.0,
        description="group judging: a group not complete (Rollout.group_size) this long after its first member "
        "arrived is judged with the members that did",
    )
    group_sweep_s: Duration = Field(
        1.0, description="group judging: how often each scorer looks for groups due (at their deadline)"
    )
    judge_cache_ttl_s: int = Field(
        24 * 3600,
        ge=0,
        description="a verdict is reused for the same judge call (messages, model, temperature, rubric set and "
        "version) this long; 0: every rollout is judged",
    )

    @field_validator("reward_policy")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        if name not in POLICIES:
            raise ValueError(f"unknown reward policy {name!r}; known: {sorted(POLICIES)}")
        return name

    def schedule_rule(self) -> Rule:
        return Rule(
            strategy=self.schedule_strategy,
            warmup_steps=self.warmup_steps,
            min_phase_steps=self.min_phase_steps,
            window_steps=self.schedule_window_steps,
        )
