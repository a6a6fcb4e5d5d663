"""A rollout's config: its run's choices where it makes them, the scorer's settings where it does not."""

from rubricd_services.scorer.config import RunConfig
from rubricd_services.scorer.settings import ScorerSettings
from tests.factories import rollout

SETTINGS = ScorerSettings(judge_mode="group", judge_votes=3, reward_policy="alternating")


def test_a_choice_the_rollout_leaves_out_is_the_setting_of_the_same_name():
    assert RunConfig.of(rollout(), SETTINGS) == RunConfig(judge_mode="group", votes=3, reward_policy="alternating")


def test_the_rollouts_own_choices_win_over_the_settings():
    chosen = rollout(judge_mode="single", judge_votes=1, reward_policy="weighted_sum")
    assert RunConfig.of(chosen, SETTINGS) == RunConfig(judge_mode="single", votes=1, reward_policy="weighted_sum")


def test_only_a_member_of_a_group_of_more_than_one_gathers_under_group_judging():
    config = RunConfig.of(rollout(), SETTINGS)
    assert config.gathers(rollout(group="g", group_size=4))
    assert config.gathers(rollout(group="g"))  # open: its deadline completes it
    assert not config.gathers(rollout(group="g", group_size=1))
    assert not config.gathers(rollout())
    assert not RunConfig.of(rollout(judge_mode="single"), SETTINGS).gathers(rollout(group="g", group_size=4))
