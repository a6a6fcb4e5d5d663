"""Typed settings shared by every service (env prefix RUBRICD_, nested with __).

Per-agent LLM settings start from `llm` and override field by field from
`agents.<name>`: e.g. RUBRICD_LLM__MODEL=gpt-4o-mini and
RUBRICD_AGENTS__JUDGE__MODEL=gpt-4o. A bad value stops the service at start
with the setting's name (see `load`).
"""

import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Annotated, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from rubricd.messages import HEALTHBENCH_AXES

# How an endpoint is asked for structured output (its dialect); see llm. `auto`: probed at start.
OutputMode = Literal["auto", "json_schema", "json_object_schema", "guided_json", "format", "json_object", "text"]
RubricsMode = Literal["global", "per_instance"]
ENDPOINT_URL = r"^https?://[^/@\s]+(/\S*)?$"  # an LLM endpoint: no credentials in it (they go in api_key)
MIN_PROMPT_TOKENS = 1024  # what an agent's instructions and data need at least, beside its answer
META_CLASS = r"^[A-Za-z0-9_.-]{1,64}$"  # a meta-class name (HealthBench's axis, without `axis:`)
# For fitting prompts to a context window: fewer characters per token than English and JSON take in most
# tokenizers, so cuts err safe (SmolLM2's gave 2.9 on a full updater prompt, chat template included: at 3 that
# prompt overran its budget by 3%, and the answer ran into the end of the window).
CHARS_PER_TOKEN = 2.5
MAX_BACKOFF_S = 30.0  # the longest backoff between two attempts of an LLM call (before jitter), or Retry-After
# What a handler's deadline allows beyond its LLM calls: its Redis and Weaviate work, and waiting for a shared slot.
HANDLER_MARGIN_S = 60.0

# The constraints many settings share: a time in seconds (above zero), a number of things (at least one), a share
# (0 to 1).
Duration = Annotated[float, Field(gt=0)]
Count = Annotated[int, Field(ge=1)]
Share = Annotated[float, Field(ge=0, le=1)]

# Delivery settings whose defaults a service may change (its settings class re-declares
# the field with the same type and its own default).
InFlight = Annotated[int, Field(ge=1, description="stream entries one process handles at once")]
ReadSize = Annotated[int, Field(ge=1, description="entries one read takes from a stream")]


class Price(BaseModel):
    """What a model's tokens cost, per million, in the deployment's currency (USD in the examples)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_per_mtok: float = Field(ge=0)
    completion_per_mtok: float = Field(ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt_per_mtok + completion_tokens * self.completion_per_mtok) / 1_000_000


class LLMSettings(BaseModel):
    """How one agent reaches its OpenAI-compatible endpoint."""

    # No credentials in the URL: the key goes in api_key (and is then masked everywhere).
    base_url: str = Field(
        "http://127.0.0.1:8099/v1",
        pattern=ENDPOINT_URL,
        description="the OpenAI-compatible endpoint (default: the local simulator); no credentials in it",
    )
    replicas: list[Annotated[str, Field(pattern=ENDPOINT_URL)]] = Field(
        [],
        description="more endpoints serving the same model as base_url (e.g. vLLM replicas), as a JSON list: each "
        "attempt goes to the least loaded one that is up, and fails over to another at once",
    )
    cooldown_s: float = Field(
        10.0,
        ge=0,
        description="with replicas, how long one that failed (unreachable, timed out, 429, 502-504) is passed over",
    )
    rpm: Count | None = Field(
        None, description="requests per minute per endpoint, paced across every process through Redis"
    )
    tpm: Count | None = Field(
        None,
        description="tokens per minute per endpoint, across every process through Redis: a call books prompt "
        "characters / 2.5 and its max_tokens, corrected with the usage its reply reports",
    )
    api_key: SecretStr = Field(SecretStr("not-needed"), description="the endpoint's API key, masked in every log")
    model: str = Field("rubricd-simulator", description="the model the endpoint serves")
    output_mode: OutputMode = Field(
        "json_schema",
        description="how the endpoint is made to follow the answer's schema (its dialect): json_schema (OpenAI, "
        "vLLM, llama-server, Ollama), json_object_schema (llama-cpp-python's server), guided_json (vLLM's field before 0.12), "
        "format (Ollama's field), json_object or text (schema in the prompt, tolerant parsing); auto probes the "
        "endpoint once at start and keeps the first that works, or stops the service naming each one's failure",
    )
    strict: bool = Field(
        True,
        description="json_schema: send OpenAI's strict form of the schema (objects closed, no length bounds, which "
        "strict mode refuses); false: the whole schema, its bounds included, for servers that enforce every keyword "
        "by grammar (llama-server, vLLM), so a small model cannot run on inside a string",
    )
    timeout_s: Duration = Field(
        60.0, description="one attempt's timeout; unless set here, each agent's own default (AGENT_DEFAULTS)"
    )
    max_retries: int = Field(
        3, ge=0, le=10, description="retries of a failed call (429, 5xx, timeout, invalid or truncated output)"
    )
    backoff_s: float = Field(
        0.5, ge=0, description="the first backoff between attempts, doubled each retry (jittered, at most 30 s)"
    )
    concurrency: Count = Field(256, description="this agent's LLM calls at once, per process")
    temperature: float = Field(0.0, ge=0, le=2, description="the sampling temperature of every call")
    max_tokens: Count | None = Field(
        None, description="the most tokens one answer may take; unset: the agent's default (see AGENT_DEFAULTS)"
    )
    context_tokens: int | None = Field(
        None,
        ge=256,
        description="the model's context window per request (llama-server: -c / --parallel); set, each agent cuts "
        "the rollout text and memory it sends to fit it with max_tokens, with a visible marker where it cut",
    )
    shared_slots: Count | None = Field(
        None,
        description="requests the endpoint serves at once (llama-server's --parallel, a replica's batch), "
        "shared by every process of the deployment through Redis; unset: not counted",
    )
    max_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="with shared_slots, the share of them this agent's calls may fill (the judge: 1), so the "
        "background agents never hold the slots the judge needs",
    )

    @model_validator(mode="after")
    def _answer_fits(self) -> "LLMSettings":
        if self.context_tokens and self.max_tokens and self.max_tokens > self.context_tokens - MIN_PROMPT_TOKENS:
            raise ValueError(
                f"max_tokens ({self.max_tokens}, the agent's default unless set) leaves under {MIN_PROMPT_TOKENS} of "
                f"context_tokens ({self.context_tokens}) for the prompt: lower max_tokens or raise context_tokens"
            )
        return self

    def longest_call_s(self) -> float:
        """The longest one call may take: every attempt (failovers to replicas too) timing out, and the longest
        wait between each."""
        attempts = 1 + self.max_retries + len(self.replicas)
        return attempts * self.timeout_s + self.max_retries * MAX_BACKOFF_S * 1.5  # backoffs are jittered up to 1.5x

    def prompt_chars(self) -> int | None:
        """How many characters of prompt fit beside the answer (None: no context window set). A token is taken
        as CHARS_PER_TOKEN characters, an underestimate for English and JSON, so the cut errs on the safe side."""
        if self.context_tokens is None:
            return None
        return int((self.context_tokens - (self.max_tokens or self.context_tokens // 4)) * CHARS_PER_TOKEN)


# Per-agent defaults, used where `llm` does not set the field itself (`agents.<name>` always wins).
# - The judge is on the trainer's path: it may take every shared slot of its endpoint (the background agents at
#   most `max_share`, 0.5), and its timeout is the shortest: a trainer waits for it.
# - Each answer is bounded: the judge's by its rubrics (15 verdicts of a 400-character explanation fit 2,048
#   tokens), the others' by their schemas' maxLength/maxItems (an analysis at most about 4,200 characters, a
#   summary 5,400, an update 5,500, the memory queries 1,000, keys and quotes included): each default is above
#   that at CHARS_PER_TOKEN characters a token, so a model that fills every bound is not cut off. The background
#   agents may take minutes on a busy endpoint.
AGENT_DEFAULTS: dict[str, dict[str, object]] = {
    "judge": {"max_share": 1.0, "max_tokens": 2048, "timeout_s": 60.0},
    "pairwise": {"max_tokens": 3072, "timeout_s": 120.0},  # two responses a rubric: up to 15 x 300 + 600 characters
    "generator": {"max_tokens": 2048, "timeout_s": 120.0},  # a prompt's rubrics: up to 8 x 300 characters
    "analyzer": {"max_tokens": 2048, "timeout_s": 180.0},
    "summarizer": {"max_tokens": 3072, "timeout_s": 300.0},
    "meta_summarizer": {"max_tokens": 3072, "timeout_s": 300.0},
    "query_writer": {"max_tokens": 512, "timeout_s": 120.0},
    "updater": {"max_tokens": 3072, "timeout_s": 300.0},
    "embedder": {},
}


# What a service answering a waiting publisher keeps (AnswerSettings); a service re-declares one for its own default.
AnswerTTL = Annotated[
    int,
    Field(
        ge=60,
        description="how long an answer is kept for redelivery: a request published again (or redelivered after "
        "its commit) gets its first answer, not a second judging; memory is about rate x ttl x the answer's size",
    ),
]
KeptMaxlen = Annotated[
    int, Field(ge=0, description="a run's last N requests are kept with their first answers (rubricd export); 0: none")
]
KeptTTL = Annotated[int, Field(ge=60, description="a run's kept requests expire this long after its last one")]


class AnswerSettings(BaseModel):
    """What the services that answer a waiting publisher (scorer, comparer, arm) share: the reply, the answer
    kept for redelivery, and the run's kept requests (each with its first answer, for `rubricd export` and
    `rubricd rescore`)."""

    reply_ttl_s: int = Field(24 * 3600, ge=60, description="an idle reply stream expires after this")
    answer_ttl_s: AnswerTTL = 3600
    kept_maxlen: KeptMaxlen = 100_000
    kept_ttl_s: KeptTTL = 30 * 24 * 3600


class ServiceSettings(BaseSettings):
    """What every service shares: where Redis, Weaviate and the LLM are."""

    model_config = SettingsConfigDict(env_prefix="RUBRICD_", env_nested_delimiter="__", extra="ignore")
    # Old env names this service still reads as their new ones (beside RENAMED's, which every service reads).
    renamed: ClassVar[dict[str, str]] = {}

    namespace: str = Field(
        "rubricd", pattern=r"^[A-Za-z0-9_-]{1,64}$", description="prefix of every stream and key of the deployment"
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6399/0",
        pattern=r"^rediss?://",
        description="the deployment's Redis (rediss:// for TLS; a locked-down service's own user and password in it)",
    )
    redis_max_connections: int = Field(512, ge=8, description="the Redis connection pool's size, per process")
    graceful_timeout_s: Duration = Field(
        15.0,
        description="on SIGTERM, how long the handlers in flight may take to finish and ack before they are "
        "cancelled (their entries then stay pending, and another consumer reclaims them); below the orchestrator's "
        "grace period (compose's stop_grace_period, Kubernetes' terminationGracePeriodSeconds)",
    )
    weaviate_url: str = Field("http://127.0.0.1:8089", description="the evaluation memory's Weaviate (HTTP)")
    weaviate_grpc_port: int = Field(50061, ge=1, le=65535, description="that Weaviate's gRPC port")
    weaviate_api_key: SecretStr | None = Field(None, description="sent to a Weaviate that requires an API key")
    # Vectors of the evaluation memory. `minilm`: all-MiniLM-L6-v2 in-process, offline.
    # `openai`: the LLM client's agent named `embedder` (base_url/api_key from `llm` and
    # `agents.embedder`), e.g. RUBRICD_AGENTS__EMBEDDER__MODEL=text-embedding-3-small.
    embedder: Literal["openai", "minilm"] = Field(
        "minilm",
        description="the memory's vectors: minilm (all-MiniLM-L6-v2 in-process, offline) or openai (the endpoint's "
        "embeddings, the agent `embedder`)",
    )
    llm: LLMSettings = LLMSettings()
    agents: dict[str, dict[str, object]] = Field(
        {},
        description="per agent, the LLM settings that differ from `llm`: RUBRICD_AGENTS__<AGENT>__<FIELD> (below)",
    )
    consumer: str = Field("", description="consumer name in the group; default host-pid")
    rubrics_mode: RubricsMode = Field("global", description="one rubric set per run, or one per run and instance key")
    meta_classes: list[Annotated[str, Field(pattern=META_CLASS)]] = Field(
        list(HEALTHBENCH_AXES),
        min_length=1,
        description="the meta-classes rubrics may use (a JSON list); default HealthBench's five axes. Seed and "
        "instance rubric files, imports and the updater's proposals are refused with any other class",
    )
    # Delivery: how every service reads its streams (see runtime.service.ServiceApp.consume).
    max_in_flight: InFlight = 32
    max_records: ReadSize = 8
    reclaim_idle_ms: int = Field(
        5_000,
        ge=100,
        description="an entry its consumer has not touched this long (it died, or its handler failed) is reclaimed",
    )
    handler_deadline_s: Duration | None = Field(
        None,
        description="how long one handler may work on an entry before it is cancelled, its failure recorded as "
        "the entry's own and the entry retried by a reclaim; unset: per stream, the longest calls of the agents its "
        "handler calls, one after another, plus 60 s (the service_started event names each)",
    )
    max_failures: Count = Field(
        3, description="an entry that failed this often for a reason of its own (not an outage) is dead-lettered"
    )
    max_redeliveries: Count = Field(
        20,
        description="an entry taken this often from consumers that died with it (a crash loop) is dead-lettered",
    )
    stream_maxlen: int = Field(100_000, ge=1000, description="cap of the streams this service writes")
    max_entry_bytes: int = Field(
        16_777_216, ge=1024, description="a larger entry of an input stream is dead-lettered unread"
    )
    dead_letter_max_bytes: int = Field(
        65_536, ge=1024, description="a dead letter keeps this much of its entry (the rest: its size only)"
    )
    dead_letter_maxlen: int = Field(10_000, ge=100, description="cap of the dead-letter stream")
    trim_interval_s: Duration = Field(5.0, description="how often input streams are trimmed below what is acked")
    # Health and metrics: with a port, GET /health (204 when the broker answers) and GET /metrics (Prometheus).
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="serve /health and /metrics here; unset: no HTTP listener"
    )
    metrics_host: str = Field("127.0.0.1", description="address of that listener (0.0.0.0 in a container)")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="the lowest level logged")
    log_format: Literal["json", "text"] = Field("json", description="json: one object per line; text: for a terminal")
    log_rollout_text: bool = Field(
        False, description="log each rollout's prompt and response (off: logs name rollouts by id only)"
    )
    prices: dict[str, Price] = Field(
        {},
        description="per model: {prompt_per_mtok, completion_per_mtok}, the price of a million tokens (e.g. USD); "
        "turns tokens into cost in metrics, `rubricd status` and the demo report; a model without one: tokens only",
    )

    @field_validator("meta_classes")
    @classmethod
    def _distinct(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError(f"meta-classes repeat: {names}")
        return names

    @model_validator(mode="after")
    def _agents_valid(self) -> "ServiceSettings":
        """Every agent's settings are checked at start, named (`agents.<name>`), not at its first call."""
        if unknown := sorted(set(self.agents) - set(AGENT_DEFAULTS)):
            raise ValueError(f"unknown agents {unknown} in RUBRICD_AGENTS__*; the agents: {sorted(AGENT_DEFAULTS)}")
        for name in sorted(AGENT_DEFAULTS):
            try:
                self.agent(name)
            except ValidationError as e:
                problems = "; ".join(
                    f"{'.'.join(map(str, err['loc'])) + ': ' if err['loc'] else ''}{err['msg']}" for err in e.errors()
                )
                raise ValueError(
                    f"agent {name!r} (RUBRICD_LLM__*, RUBRICD_AGENTS__{name.upper()}__*): {problems}"
                ) from None
        return self

    def handler_deadline(self, agents: Sequence[str]) -> float:
        """How long a handler that calls `agents` may take (`handler_deadline_s` when set)."""
        if self.handler_deadline_s is not None:
            return self.handler_deadline_s
        return HANDLER_MARGIN_S + sum(self.agent(name).longest_call_s() for name in agents)

    def agent(self, name: str) -> LLMSettings:
        """The LLM settings of one agent: `llm`, AGENT_DEFAULTS where `llm` leaves a field unset, `agents.<name>`."""
        role = {k: v for k, v in AGENT_DEFAULTS.get(name, {}).items() if k not in self.llm.model_fields_set}
        return LLMSettings.model_validate({**self.llm.model_dump(), **role, **self.agents.get(name, {})})


S = TypeVar("S", bound=BaseSettings)


# Settings renamed for one word per concept: a deployment's old name is still read, with a warning on stderr.
RENAMED = {
    "RUBRICD_MAX_DELIVERIES": "RUBRICD_MAX_FAILURES",
    "RUBRICD_LOCK_TIMEOUT_S": "RUBRICD_UPDATE_LOCK_S",
    "RUBRICD_UNDEFINED_CLASS_REWARD": "RUBRICD_UNDEFINED_META_CLASS_REWARD",
}


def read_renamed(environ: MutableMapping[str, str], renamed: Mapping[str, str] = RENAMED) -> None:
    """Give each renamed setting's old name to its new one (exit if both are set and differ)."""
    for old, new in renamed.items():
        if old not in environ:
            continue
        if environ.get(new, environ[old]) != environ[old]:
            sys.exit(f"{old} is now {new}, and both are set: keep {new}")
        environ[new] = environ[old]
        print(f"rubricd: {old} is now {new}; read as {new}={environ[old]!r}", file=sys.stderr)


def load(cls: type[S]) -> S:
    """Read settings from the environment, or exit naming every bad setting."""
    read_renamed(os.environ, {**RENAMED, **getattr(cls, "renamed", {})})
    try:
        return cls()
    except ValidationError as e:
        prefix = cls.model_config.get("env_prefix", "")
        names = ["__".join(str(p) for p in err["loc"]).upper() for err in e.errors()]
        lines = [
            f"  {name if name.startswith(prefix) else prefix + name}: {err['msg']}" if err["loc"] else f"  {err['msg']}"
            for name, err in zip(names, e.errors())
        ]
        sys.exit(f"{cls.__name__}: invalid settings\n" + "\n".join(lines))
