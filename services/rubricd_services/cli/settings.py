"""What the CLI's commands that call an LLM read of the services' settings (env prefix RUBRICD_)."""

from rubricd_services.judges.settings import JudgeSettings, PairwiseSettings
from rubricd_services.rubrics.seeds import SeedSettings
from rubricd_services.rubrics.settings import GeneratorSettings
from rubricd_services.settings import ServiceSettings


class EvalSettings(ServiceSettings, JudgeSettings, PairwiseSettings):
    """What `rubricd judge eval` reads of the scorer's and the comparer's settings: the LLM, the prices, the rollout
    judge's and the pairwise judge's."""


class DatasetSettings(ServiceSettings, SeedSettings, GeneratorSettings, PairwiseSettings):
    """What `rubricd arm dataset` reads of the arm service's settings: the seeds, the generator's and the pairwise
    judge's."""
