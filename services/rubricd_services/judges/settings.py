"""The judges' settings, mixed into the settings of the services and commands that judge (env prefix RUBRICD_)."""

from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from rubricd.messages import MAX_VOTES, JudgeMode
from rubricd_services.runtime.prompts import PromptFile
from rubricd_services.settings import Count, Share

from .groups import LABELS, MAX_MEMBERS
from .verdicts import Calls, Style


class JudgeSettings(BaseModel):
    """The rollout judge's settings (mixed into the scorer's)."""

    judge_prompt: PromptFile = Field(None, description="judge instructions; default: prompts/judge.md")
    judge_calls: Calls = Field(
        "one",
        description="one: every rubric of a rollout in one judge call; per_rubric: one call per rubric, at once "
        "(as HealthBench's grader; no verdict cache)",
    )
    judge_explain: bool = Field(
        True, description="each verdict with its explanation first; false: the verdict alone (fewer tokens)"
    )
    judge_trajectory_prompt: PromptFile = Field(
        None, description="judge instructions for trajectories; default: prompts/judge-trajectory.md"
    )
    judge_reasoning: bool = Field(
        False, description="show the judge a trajectory's reasoning (the assistant turns' `reasoning`); false: left out"
    )
    judge_mode: JudgeMode = Field(
        "single",
        description="single: each rollout judged alone; group: the rollouts of a sample group (Rollout.group) judged "
        "together, every rubric for every response in one call; a run chooses with Rollout.judge_mode",
    )
    judge_votes: int = Field(
        1,
        ge=1,
        le=MAX_VOTES,
        description="judge calls per rollout (per group), each in another order; each rubric's verdict is their "
        "majority, a tie keeping the first call's; a run chooses with Rollout.judge_votes (with judge_calls "
        "per_rubric a rollout's votes repeat the same calls: only the sampling temperature can tell them apart)",
    )
    judge_group_members: int = Field(
        MAX_MEMBERS,
        ge=2,
        le=len(LABELS),
        description="group judging: at most this many responses in one judge call; a larger group (or one over the "
        "judge's prompt budget) is judged in sub-groups",
    )
    judge_group_prompt: PromptFile = Field(
        None, description="judge instructions for a group; default: prompts/judge-group.md"
    )

    def judge_style(self) -> Style:
        return Style(self.judge_calls, self.judge_explain)


class PairwiseSettings(BaseModel):
    """The pairwise judge's settings (mixed into the comparer's and the arm service's)."""

    pairwise_ties: bool = Field(
        True,
        description="two responses with equal net points under the rubrics tie; false: the judge's gatekeeper "
        "criterion, else its stated preference, decides",
    )
    pairwise_prompt: PromptFile = Field(None, description="pairwise judge instructions; default: prompts/pairwise.md")


class CanarySettings(BaseModel):
    """The scorer's canary settings (RUBRICD_CANARY_*)."""

    canary_set: Path | None = Field(
        None,
        description="a labelled JSONL (`rubricd judge eval`'s format) whose items the scorers judge a few of per "
        "step of every run, to measure the judge during training; a run's own (`rubricd judge canaries`) replaces "
        "it; unset: canaries only for runs with their own",
    )
    canary_items: int = Field(4, ge=1, le=100, description="canary items judged per step of a run")
    canary_floor: Share = Field(0.6, description="judge_drift fires when a step's canary agreement falls below this")
    canary_margin: Share = Field(
        0.15,
        description="judge_drift fires when a step's canary agreement is this far below the run's baseline (the "
        "mean over its first canary_baseline_steps canary steps)",
    )
    canary_baseline_steps: Count = Field(3, description="the run's first N canary steps make its baseline")

    @field_validator("canary_set")
    @classmethod
    def _a_file(cls, path: Path | None) -> Path | None:
        """Only that it is a file: its items are read once, when the canaries start (evaluation.canaries.read_set)."""
        if path is not None and not path.is_file():
            raise ValueError(f"not a labelled set: {path} is not a file")
        return path
