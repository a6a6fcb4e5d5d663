"""Latency and failure injection for the simulator (test/demo tool).

A request fails by a `[sim:fail=...]` marker in its messages or the same as `X-Sim-*` headers (with `times=N`
only its first N attempts), else at random with probability `fail_rate`; the kinds are `timeout`, `malformed`,
`invalid`, `truncated` or an HTTP status. The markers and kinds: docs/researchers/demo.md, "Forcing failures".
"""

import os
import random
import re
from collections import OrderedDict
from collections.abc import Mapping

import msgspec

from .updates import HARMS

CONTENT_KINDS = ("timeout", "malformed", "invalid", "truncated")
# Ways of asking for structured output (llm's dialects); `text` is always understood.
DIALECTS = ("json_schema", "json_object_schema", "guided_json", "format", "json_object", "text")
MARKER = re.compile(r"\[sim:([^\]\n]{1,200})\]")
_MAX_TRACKED = 100_000


class SimConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What the simulator does to every request; changeable at runtime via /admin/config."""

    latency_ms: float = 0.0  # mean added latency of a chat completion
    latency_jitter_ms: float = 0.0  # latency is uniform in mean ± jitter
    fail_rate: float = 0.0  # probability that a request fails at random
    failures: list[str] = msgspec.field(default_factory=lambda: ["429", "500", "malformed", "truncated"])
    timeout_hold_s: float = 600.0  # how long a `timeout` holds a request whose client stays
    cache_ttl_s: float = 300.0  # a system message seen this recently counts as cached
    # The structured-output requests it honours (see llm); like real servers, it answers an unsupported
    # response_format with a 500 that names the request invalid, and ignores unknown fields (guided_json, format).
    dialects: list[str] = msgspec.field(default_factory=lambda: list(DIALECTS))
    slots: int | None = None  # chat completions served at once (the rest wait in line), as a model server's
    retry_after_s: float = 0.0  # a 429 or 503 says Retry-After this many seconds (0: no header)
    # A judge that errs at a known rate: each pointwise verdict's `met` is inverted with this probability (drawn
    # from a seeded sequence, so a run of N verdicts flips the same number whatever their order).
    flip_rate: float = 0.0
    # An updater that changes something every step (a proposal without a change reweights an adaptive rubric):
    # a version a step, for a long run's rubric history (the soak's --churn).
    churn: bool = False
    # An updater whose first proposal of a run that adds a rubric is harmful (simulator.updates.harmful: `inverted`
    # or `collateral`), its later ones as usual: one proposal the promotion gate must reject, then a good one.
    harmful: str | None = None

    def __post_init__(self) -> None:
        if self.latency_ms < 0 or self.latency_jitter_ms < 0 or self.timeout_hold_s < 0 or self.retry_after_s < 0:
            raise ValueError("latencies must be >= 0")
        if not 0 <= self.fail_rate <= 1:
            raise ValueError("fail_rate must be within [0, 1]")
        if not 0 <= self.flip_rate <= 1:
            raise ValueError("flip_rate must be within [0, 1]")
        for kind in self.failures:
            check_kind(kind)
        if self.harmful is not None and self.harmful not in HARMS:
            raise ValueError(f"unknown harmful {self.harmful!r}: use {', '.join(HARMS)}")
        if self.slots is not None and self.slots < 1:
            raise ValueError("slots must be >= 1")
        if unknown := set(self.dialects) - set(DIALECTS):
            raise ValueError(f"unknown dialects {sorted(unknown)}: use {', '.join(DIALECTS)}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "SimConfig":
        """RUBRICD_SIM_LATENCY_MS, _LATENCY_JITTER_MS, _FAIL_RATE, _FLIP_RATE, _SLOTS, _CHURN (1 or 0), _HARMFUL,
        _FAILURES and _DIALECTS (comma lists)."""
        fields = {
            "latency_ms": "RUBRICD_SIM_LATENCY_MS",
            "latency_jitter_ms": "RUBRICD_SIM_LATENCY_JITTER_MS",
            "fail_rate": "RUBRICD_SIM_FAIL_RATE",
            "timeout_hold_s": "RUBRICD_SIM_TIMEOUT_HOLD_S",
            "cache_ttl_s": "RUBRICD_SIM_CACHE_TTL_S",
            "retry_after_s": "RUBRICD_SIM_RETRY_AFTER_S",
            "flip_rate": "RUBRICD_SIM_FLIP_RATE",
        }
        values: dict[str, object] = {k: float(env[v]) for k, v in fields.items() if env.get(v)}
        if env.get("RUBRICD_SIM_FAILURES"):
            values["failures"] = kinds(env["RUBRICD_SIM_FAILURES"])
        if env.get("RUBRICD_SIM_CHURN"):
            values["churn"] = env["RUBRICD_SIM_CHURN"] == "1"
        if env.get("RUBRICD_SIM_HARMFUL"):
            values["harmful"] = env["RUBRICD_SIM_HARMFUL"]
        if env.get("RUBRICD_SIM_SLOTS"):
            values["slots"] = int(env["RUBRICD_SIM_SLOTS"])
        if env.get("RUBRICD_SIM_DIALECTS"):
            values["dialects"] = [d.strip() for d in env["RUBRICD_SIM_DIALECTS"].split(",") if d.strip()]
        return cls(**values)  # type: ignore[arg-type]

    def latency_s(self) -> float:
        jitter = random.uniform(-self.latency_jitter_ms, self.latency_jitter_ms)
        return max(0.0, self.latency_ms + jitter) / 1000


class Directive(msgspec.Struct, kw_only=True):
    """A request's own instructions to the simulator (marker or headers)."""

    fail: str | None = None
    times: int | None = None  # fail only the first `times` attempts of this conversation
    latency_ms: float | None = None
    retry_after: float | None = None  # seconds a 429 or 503 says to wait
    agent: str | None = None  # `fail` applies only to requests for this schema name


def check_kind(kind: str) -> str:
    if kind in CONTENT_KINDS or (kind.isdigit() and 400 <= int(kind) <= 599):
        return kind
    raise ValueError(f"unknown failure kind {kind!r}: use {', '.join(CONTENT_KINDS)} or a 4xx/5xx status")


def kinds(text: str) -> list[str]:
    return [check_kind(k.strip()) for k in text.split(",") if k.strip()]


def directive(headers: Mapping[str, str], texts: list[str]) -> Directive:
    """Read `[sim:...]` markers (the last one wins per key), then headers over them."""
    found: dict[str, str] = {}
    for text in texts:
        for match in MARKER.finditer(text):
            for part in match.group(1).split(","):
                key, _, value = part.partition("=")
                found[key.strip().lower()] = value.strip()
    for key in ("fail", "times", "latency_ms", "retry_after", "agent"):
        header = headers.get("x-sim-" + ("fail-times" if key == "times" else key.replace("_", "-")))
        if header:
            found[key] = header.strip()
    return Directive(
        fail=check_kind(found["fail"]) if found.get("fail") else None,
        times=int(found["times"]) if found.get("times") else None,
        latency_ms=float(found["latency_ms"]) if found.get("latency_ms") else None,
        retry_after=float(found["retry_after"]) if found.get("retry_after") else None,
        agent=found.get("agent") or None,
    )


class FaultPlan:
    """Decides each request's fault; remembers attempts per conversation for `times=N`."""

    def __init__(self) -> None:
        self._attempts: OrderedDict[bytes, int] = OrderedDict()

    def reset(self) -> None:
        self._attempts.clear()

    def decide(self, config: SimConfig, d: Directive, conversation: bytes, schema: str | None = None) -> str | None:
        """The fault of one request (None: none); `schema`, the requested schema's name, for `agent=`."""
        if d.fail is not None and d.agent not in (None, schema):
            d = msgspec.structs.replace(d, fail=None)
        if d.fail is not None:
            if d.times is None:
                return d.fail
            n = self._attempts.pop(conversation, 0) + 1
            self._attempts[conversation] = n
            if len(self._attempts) > _MAX_TRACKED:
                self._attempts.popitem(last=False)
            return d.fail if n <= d.times else None
        if config.fail_rate and config.failures and random.random() < config.fail_rate:
            return random.choice(config.failures)
        return None
