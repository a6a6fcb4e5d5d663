"""The comparer's settings (env prefix RUBRICD_, see settings)."""

from pydantic import Field

from rubricd_services.judges.settings import PairwiseSettings
from rubricd_services.rubrics.seeds import SeedSettings
from rubricd_services.rubrics.settings import GeneratorSettings
from rubricd_services.settings import AnswerSettings, KeptMaxlen, KeptTTL, ServiceSettings


class ComparerSettings(ServiceSettings, AnswerSettings, SeedSettings, GeneratorSettings, PairwiseSettings):
    renamed = {
        "RUBRICD_PREFERENCE_TTL_S": "RUBRICD_ANSWER_TTL_S",
        "RUBRICD_PREFERENCES_MAXLEN": "RUBRICD_KEPT_MAXLEN",
        "RUBRICD_PREFERENCES_TTL_S": "RUBRICD_KEPT_TTL_S",
    }
    pairwise_both_orders: bool = Field(
        True,
        description="ask the pairwise judge in both orders (A first, B first); a preference that flips with the "
        "order is reported inconsistent, with no winner",
    )
    max_comparison_bytes: int = Field(2_000_000, ge=1024, description="a larger comparison is rejected")
    kept_maxlen: KeptMaxlen = Field(
        100_000,
        description="committed comparisons kept per run for `rubricd export` (<ns>:preferences:<run>, trimmed "
        "past this); each entry is the comparison and its Preference, about 2 x the texts + 0.3 KB per rubric; "
        "0: none",
    )
    kept_ttl_s: KeptTTL = Field(
        30 * 24 * 3600, description="a run's kept comparisons expire this long after its last one"
    )
