"""What `rubricd judge eval` reads of the services' settings (env prefix RUBRICD_); `rubricd arm dataset`'s are
arm.settings.DatasetSettings."""

from rubricd_services.judges.settings import JudgeSettings, PairwiseSettings
from rubricd_services.settings import ServiceSettings


class EvalSettings(ServiceSettings, JudgeSettings, PairwiseSettings):
    """What `rubricd judge eval` reads of the scorer's and the comparer's settings: the LLM, the prices, the rollout
    judge's and the pairwise judge's."""
