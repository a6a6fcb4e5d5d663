"""Rubric generation's settings, as a service that generates reads them."""

import pytest
from pydantic import ValidationError

from rubricd_services.scorer.settings import ScorerSettings


def test_generation_is_refused_at_start_outside_per_instance_mode():
    assert ScorerSettings(rubrics_mode="per_instance", generate_rubrics=True).generate_rubrics
    assert not ScorerSettings().generate_rubrics  # off by default
    with pytest.raises(ValidationError, match="RUBRICD_RUBRICS_MODE=per_instance"):
        ScorerSettings(generate_rubrics=True)


def test_the_generators_points_bound_is_a_setting():
    assert ScorerSettings().generate_max_points == 10.0
    assert ScorerSettings(generate_max_points=4).generate_max_points == 4.0
    with pytest.raises(ValidationError):
        ScorerSettings(generate_max_points=0)
