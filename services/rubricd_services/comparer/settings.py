"""The comparer's settings (env prefix RUBRICD_, see common.settings)."""

from pydantic import Field

from rubricd_services.common.seeds import SeedSettings
from rubricd_services.common.settings import ServiceSettings
from rubricd_services.judges.settings import PairwiseSettings
from rubricd_services.rubrics.generation import GeneratorSettings


class ComparerSettings(ServiceSettings, SeedSettings, GeneratorSettings, PairwiseSettings):
    pairwise_both_orders: bool = Field(
        True,
        description="ask the pairwise judge in both orders (A first, B first); a preference that flips with the "
        "order is reported inconsistent, with no winner",
    )
    max_comparison_bytes: int = Field(2_000_000, ge=1024, description="a larger comparison is rejected")
    preference_ttl_s: int = Field(
        3600, ge=60, description="how long a Preference is kept for redelivery (a comparison published again)"
    )
    reply_ttl_s: int = Field(24 * 3600, ge=60, description="an idle reply stream expires after this")
    preferences_maxlen: int = Field(
        100_000,
        ge=100,
        description="committed comparisons kept per run for `rubricd export` (<ns>:preferences:<run>, trimmed "
        "past this); each entry is the comparison and its Preference, about 2 x the texts + 0.3 KB per rubric",
    )
    preferences_ttl_s: int = Field(
        30 * 24 * 3600, ge=60, description="a run's kept comparisons expire this long after its last one"
    )
