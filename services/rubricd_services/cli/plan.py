"""`rubricd plan`: the replicas, memory and LLM tokens a load needs, from the costs one rollout was measured at.

The arithmetic is `plan(Load, Costs)`; the costs (`MEASURED`) and where each was measured, and where one Redis or
one Weaviate stops being enough: docs/operators/capacity.md.
"""

import argparse
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import msgspec
from pydantic_settings import BaseSettings

from .context import Context, Failed, table

SUMMARY = "the replicas per service, Redis and Weaviate memory and LLM tokens per hour a training load needs"
HELP = """\
The replicas of each service, Redis's and Weaviate's memory and the LLM tokens per hour that a load needs,
from the measured cost of one rollout in each service (docs/operators/capacity.md). The settings' defaults
are assumed (answer and kept TTLs, kept_maxlen, max_in_flight); --retention-steps is the summarizers'
RUBRICD_MEMORY_KEEP_STEPS for analyses and chunk summaries (0: kept for good, the default).
"""
DAY_S = 86_400


@dataclass(frozen=True)
class Load:
    """What the trainers send: rollouts a second over all runs, in steps of `rollouts_per_step` per run, judged
    each in `judge_latency_s` (alone, or in sample groups of `group_size`), analysed per `analysis_sample`."""

    rollouts_per_s: float
    rollouts_per_step: int
    judge_latency_s: float = 2.0
    group_size: int = 1
    group_judging: bool = False
    analysis_sample: str = "all"  # all, extremes, or K per group
    runs: int = 1
    rollout_tokens: int = 1000
    retention_steps: int = 0  # analyses and chunk summaries kept for the last N steps (0: for good)
    analyst_latency_s: float = 5.0

    def check(self) -> None:
        """Refuse what no run can be, naming the flag."""
        if self.rollouts_per_s <= 0:
            raise ValueError("--rollouts-per-day (or --rollouts-per-second): more than 0")
        if self.rollouts_per_step < 1:
            raise ValueError("--rollouts-per-step: at least 1")
        if self.runs < 1:
            raise ValueError("--runs: at least 1")
        if self.group_size < 1 or self.group_size > self.rollouts_per_step:
            raise ValueError(f"--group-size: from 1 to --rollouts-per-step ({self.rollouts_per_step})")
        if self.judge_latency_s <= 0 or self.analyst_latency_s <= 0:
            raise ValueError("--judge-latency and --analyst-latency: more than 0 seconds")
        if self.rollout_tokens < 1 or self.retention_steps < 0:
            raise ValueError("--rollout-tokens: at least 1; --retention-steps: 0 (keep all) or more")
        if self.analysis_sample not in ("all", "extremes") and not (
            self.analysis_sample.isdigit() and 1 <= int(self.analysis_sample) <= self.group_size
        ):
            raise ValueError(f"--analysis-sample: all, extremes, or K from 1 to --group-size ({self.group_size})")

    @property
    def analysed_share(self) -> float:
        """The share of rollouts the analyzers read."""
        if self.analysis_sample == "all" or self.group_size == 1:
            return 1.0
        k = 2 if self.analysis_sample == "extremes" else int(self.analysis_sample)
        return min(k, self.group_size) / self.group_size

    @property
    def steps_per_s(self) -> float:
        return self.rollouts_per_s / self.rollouts_per_step


@dataclass(frozen=True)
class Costs:
    """What one rollout, analysis or step costs each part beyond what a process costs idle, and that (MEASURED: the
    soak's, docs/operators/capacity.md)."""

    scorer_cpu_ms: float  # per rollout
    analyzer_cpu_ms: float  # per analysed rollout (its embedding included)
    summarizer_cpu_ms: float  # per step
    updater_cpu_ms: float  # per step
    redis_cpu_ms: float  # per rollout, every service's commands
    score_bytes: int  # a stored answer (Score) in Redis
    verdict_bytes: int  # a kept verdict (the judge cache)
    event_bytes: int  # an events stream entry
    analysis_bytes: int  # an analysis message
    weaviate_object_bytes: int  # one memory object in Weaviate's memory (vector, text, message, index)
    judge_overhead_tokens: int  # a judge call's prompt beside the rollouts it shows
    analyst_overhead_tokens: int  # an analyst call's prompt beside its rollout
    summarizer_tokens_per_analysis: int
    summarizer_overhead_tokens: int  # per step: the meta-summary and each chunk's instructions
    updater_tokens: int  # per step: the updater's and the query writer's prompts
    idle_cores: float = 0.0  # a service process with nothing to do (its polls: blocking reads, reclaims, metrics)
    busy: float = 0.7  # a process is planned at this share of one core


MEASURED = Costs(
    scorer_cpu_ms=6.0,
    analyzer_cpu_ms=450.0,
    summarizer_cpu_ms=410.0,
    updater_cpu_ms=200.0,
    redis_cpu_ms=5.0,
    score_bytes=1_200,
    verdict_bytes=600,
    event_bytes=400,
    analysis_bytes=2_500,
    weaviate_object_bytes=24_000,
    judge_overhead_tokens=400,
    analyst_overhead_tokens=1_000,
    summarizer_tokens_per_analysis=160,
    summarizer_overhead_tokens=600,
    updater_tokens=2_600,
    idle_cores=0.015,
)


@dataclass(frozen=True)
class Defaults:
    """The settings a plan assumes (`read()`: the services' own defaults) and where one Redis or one Weaviate
    stops being enough."""

    answer_ttl_s: int
    judge_cache_ttl_s: int
    kept_maxlen: int
    kept_ttl_s: int
    stream_maxlen: int
    scorer_in_flight: int
    analyzer_in_flight: int
    chunk_size: int
    redis_max_gb: float = 25.0  # one Redis's memory a plan stays under (then: Redis Cluster)
    redis_max_cpu: float = 0.5  # one core's share one Redis may spend on commands
    weaviate_max_objects: int = 50_000_000  # one Weaviate node's objects a plan stays under (then: shards)

    @classmethod
    def read(cls) -> "Defaults":
        """The defaults of the scorer's, the analyzers' and the summarizers' settings, as the services have them
        (imported here, by the one command that reads them: the rest of the command line imports no service)."""
        from rubricd_services.analyzer.settings import AnalyzerSettings
        from rubricd_services.scorer.settings import ScorerSettings
        from rubricd_services.summarizer.settings import SummarizerSettings

        scorer = default_of(ScorerSettings)
        return cls(
            answer_ttl_s=scorer("answer_ttl_s"),
            judge_cache_ttl_s=scorer("judge_cache_ttl_s"),
            kept_maxlen=scorer("kept_maxlen"),
            kept_ttl_s=scorer("kept_ttl_s"),
            stream_maxlen=scorer("stream_maxlen"),
            scorer_in_flight=scorer("max_in_flight"),
            analyzer_in_flight=default_of(AnalyzerSettings)("max_in_flight"),
            chunk_size=default_of(SummarizerSettings)("chunk_size"),
        )


def default_of(settings: type[BaseSettings]) -> Callable[[str], Any]:
    """`default_of(Settings)(name)`: the default of the setting NAME."""
    return lambda name: settings.model_fields[name].get_default(call_default_factory=True)


@dataclass(frozen=True)
class Plan:
    replicas: dict[str, int]
    cores: dict[str, float]
    redis_gb: dict[str, float]
    weaviate_objects: int  # after a day of the load
    weaviate_gb: float
    weaviate_gb_per_day: float  # what each further day adds
    tokens_per_hour: dict[str, float]
    limits: list[str] = field(default_factory=list)


def plan(load: Load, costs: Costs = MEASURED, d: Defaults | None = None) -> Plan:
    """The replicas, memory and tokens `load` needs at `costs`, under the settings D (default: the services')."""
    load.check()
    d = d or Defaults.read()
    r, steps = load.rollouts_per_s, load.steps_per_s
    analysed = r * load.analysed_share
    work = {  # cores the load keeps busy, beyond what the processes cost idle
        "scorer": r * costs.scorer_cpu_ms / 1000,
        "analyzer": analysed * costs.analyzer_cpu_ms / 1000,
        "summarizer": steps * costs.summarizer_cpu_ms / 1000,
        "updater": steps * costs.updater_cpu_ms / 1000,
    }
    waiting = {  # requests in flight at once, over what one process holds
        "scorer": r * load.judge_latency_s / d.scorer_in_flight,
        "analyzer": analysed * load.analyst_latency_s / d.analyzer_in_flight,
    }
    room = costs.busy - costs.idle_cores  # of a process's planned share, what is left for work
    replicas = {name: max(1, math.ceil(max(cores / room, waiting.get(name, 0.0)))) for name, cores in work.items()}
    cores = {name: work[name] + replicas[name] * costs.idle_cores for name in work} | {
        "redis": r * costs.redis_cpu_ms / 1000
    }
    kept_per_run = min(d.kept_maxlen, r / load.runs * d.kept_ttl_s)
    rollout_bytes = load.rollout_tokens * 4
    redis_bytes = {
        "scores": r * d.answer_ttl_s * costs.score_bytes,
        "verdicts": r * d.judge_cache_ttl_s * costs.verdict_bytes,
        "kept rollouts": load.runs * kept_per_run * (rollout_bytes + costs.score_bytes),
        "streams": d.stream_maxlen * (2 * rollout_bytes + costs.score_bytes + costs.analysis_bytes + costs.event_bytes),
    }
    redis_gb = {k: v / 1e9 for k, v in redis_bytes.items()} | {"total": sum(redis_bytes.values()) / 1e9}
    per_step = load.rollouts_per_step * load.analysed_share  # analyses a step stores
    chunks = math.ceil(per_step / d.chunk_size)
    steps_per_day = steps * DAY_S
    # A step summary a step, kept for good (a rubric update adds one more now and then: not counted).
    if load.retention_steps:
        kept_steps = load.retention_steps * load.runs
        objects = int(kept_steps * (per_step + chunks) + steps_per_day)
        objects_per_day = int(steps_per_day)
    else:
        objects = objects_per_day = int(steps_per_day * (per_step + chunks + 1))
    judge_calls_per_s = r / load.group_size if load.group_judging else r
    tokens = {
        "judge": judge_calls_per_s * costs.judge_overhead_tokens + r * load.rollout_tokens,
        "analyst": analysed * (costs.analyst_overhead_tokens + load.rollout_tokens),
        "summarizers": steps * (costs.summarizer_overhead_tokens + per_step * costs.summarizer_tokens_per_analysis),
        "updater": steps * costs.updater_tokens,
    }
    limits = []
    if redis_gb["total"] > d.redis_max_gb:
        limits.append(
            f"Redis: {redis_gb['total']:.1f} GB is more than one Redis ({d.redis_max_gb:g} GB): lower "
            "RUBRICD_KEPT_MAXLEN or RUBRICD_KEPT_TTL_S, or shard (Redis Cluster: rubricd's keys would need the run "
            "in a hash tag; not done)"
        )
    if cores["redis"] > d.redis_max_cpu:
        limits.append(
            f"Redis: {cores['redis']:.2f} of a core on commands is more than one Redis ({d.redis_max_cpu:g}): "
            "Redis Cluster (not done)"
        )
    if objects > d.weaviate_max_objects:
        limits.append(
            f"Weaviate: {objects:,} objects is more than one node ({d.weaviate_max_objects:,}): retention "
            "(--retention-steps), or Weaviate's sharding across nodes (one collection, unchanged in rubricd)"
        )
    return Plan(
        replicas=replicas,
        cores=cores,
        redis_gb=redis_gb,
        weaviate_objects=objects,
        weaviate_gb=objects * costs.weaviate_object_bytes / 1e9,
        weaviate_gb_per_day=objects_per_day * costs.weaviate_object_bytes / 1e9,
        tokens_per_hour={k: v * 3600 for k, v in tokens.items()},
        limits=limits,
    )


def arguments(p: argparse.ArgumentParser) -> None:
    rate = p.add_mutually_exclusive_group(required=True)
    rate.add_argument("--rollouts-per-day", type=float, help="over every run")
    rate.add_argument("--rollouts-per-second", type=float, help="over every run")
    p.add_argument("--rollouts-per-step", type=int, required=True, help="a run's rollouts in one step")
    p.add_argument("--runs", type=int, default=1, help="runs at once, sharing the rate (default 1)")
    p.add_argument("--judge-latency", type=float, default=2.0, metavar="S", help="one judge call (default 2 s)")
    p.add_argument("--analyst-latency", type=float, default=5.0, metavar="S", help="one analysis (default 5 s)")
    p.add_argument("--group-size", type=int, default=1, help="responses per prompt, a sample group (default 1)")
    p.add_argument("--group-judging", action="store_true", help="each group judged in one call (--judge group)")
    p.add_argument("--analysis-sample", default="all", help="all, extremes, or K per group (default all)")
    p.add_argument("--rollout-tokens", type=int, default=1000, help="a rollout's prompt and response (default 1000)")
    p.add_argument("--retention-steps", type=int, default=0, help="analyses kept for the last N steps (0: all)")
    p.add_argument("--json", action="store_true", help="the plan as one JSON object")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace, _: Context) -> int:
    rate = args.rollouts_per_second if args.rollouts_per_second is not None else args.rollouts_per_day / DAY_S
    names = {f.name for f in fields(Load)} - {"rollouts_per_s"}
    load = Load(rollouts_per_s=rate, **{k: v for k, v in vars(args).items() if k in names})
    try:
        found = plan(load)
    except ValueError as e:
        raise Failed(str(e)) from None
    if args.json:
        print(msgspec.json.encode({"load": asdict(load), **asdict(found)}).decode())
        return 0
    print(render(load, found))
    return 0


def render(load: Load, p: Plan) -> str:
    day = load.rollouts_per_s * DAY_S
    head = (
        f"{day:,.0f} rollouts a day ({load.rollouts_per_s:.2f}/s), {load.runs} run(s), steps of "
        f"{load.rollouts_per_step}, {load.analysed_share:.0%} analysed"
    )
    services = table(
        [[name, n, f"{p.cores[name]:.2f}"] for name, n in p.replicas.items()], ["SERVICE", "REPLICAS", "CORES"]
    )
    redis = ", ".join(f"{k} {v:.2f}" for k, v in p.redis_gb.items() if k != "total")
    memory = [
        f"Redis: {p.redis_gb['total']:.2f} GB ({redis}), {p.cores['redis']:.2f} of a core",
        f"Weaviate after a day: {p.weaviate_objects:,} objects, {p.weaviate_gb:.2f} GB; each further day adds "
        f"{p.weaviate_gb_per_day:.2f} GB",
        "LLM tokens an hour (prompt): " + ", ".join(f"{k} {v:,.0f}" for k, v in p.tokens_per_hour.items()),
    ]
    return "\n".join([head, "", services, "", *memory, *(f"limit: {x}" for x in p.limits)])
