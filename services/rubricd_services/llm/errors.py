"""What a failed attempt says: whether a retry can help, and when.

The LLM client retries what a retry can fix (timeouts, connection errors, 429, 5xx,
invalid or truncated output). A refusal a retry cannot fix (4xx, or a 5xx that says
the request is invalid) fails the call at once with the server's reason. What
reaches a log or an `LLMError` is redacted: no key, even one a provider echoes back.
"""

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass

import openai

from rubricd_services.settings import MAX_BACKOFF_S, LLMSettings

_OVERLOADED = (408, 429, 502, 503, 504)  # statuses that say the endpoint, not the request, failed
_USERINFO = re.compile(r"//[^/@\s]+@")
_INVALID_REQUEST = re.compile(
    r"input should be|not supported|unsupported|invalid|validation error|extra (inputs|fields)|unknown (field|param)",
    re.I,
)
_KEYLIKE = re.compile(r"\b(sk|key|api[-_]?key)[-_][A-Za-z0-9_*.\-]{4,}", re.I)


class LLMError(Exception):
    """An agent's call failed after its retries. The text is short and safe to log.

    `transient`: the last attempt failed for the endpoint's sake (unreachable, timed out, overloaded: 429, 502,
    503, 504), not for the request's; a later try of the same request may succeed.
    """

    def __init__(self, agent: str, attempts: int, reason: str, *, transient: bool = False) -> None:
        self.agent, self.attempts, self.reason, self.transient = agent, attempts, reason, transient
        super().__init__(f"LLM agent {agent!r} failed after {attempts} attempt(s): {reason}")


class Retryable(Exception):
    """A reply was unusable (unreadable, without choices, invalid or truncated output): asking again may do better."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Failed:
    """Why an attempt failed, and what that says about the next."""

    reason: str
    transient: bool = False  # the endpoint's failure, not the request's
    final: bool = False  # the request itself is wrong: retrying cannot help
    retry_after_s: float = 0.0


def failure(error: Exception, s: LLMSettings, url: str) -> Failed:
    """What an attempt's error says: its reason, whether the endpoint or the request failed, whether a retry can
    help and when."""
    if isinstance(error, Retryable):
        return Failed(error.reason)
    if isinstance(error, openai.APITimeoutError) and not _caused_by(error, ConnectionError):
        return Failed(f"timed out after {s.timeout_s:g}s", transient=True)
    if isinstance(error, openai.APIConnectionError):  # aiohttp's refused connection comes as a connect timeout
        return Failed(f"cannot connect to {url}", transient=True)
    assert isinstance(error, openai.APIStatusError)
    reason, status = f"HTTP {error.status_code}: {clip(error.message)}", error.status_code
    if (status not in (408, 429) and status < 500) or _refused(error):
        return Failed(reason, final=True)
    return Failed(reason, transient=status in _OVERLOADED, retry_after_s=_retry_after(error.response.headers))


def backoff(base_s: float, retry: int) -> float:
    return min(MAX_BACKOFF_S, base_s * 2.0 ** (retry - 1)) * random.uniform(0.5, 1.5)


def _refused(error: openai.APIStatusError) -> bool:
    """A 500 or 501 whose message says the request was invalid (some servers answer a request they cannot
    parse, e.g. an unsupported response_format, with 500): retrying the same request cannot help."""
    return error.status_code in (500, 501) and bool(_INVALID_REQUEST.search(str(error.message)))


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    while error is not None:
        if isinstance(error, kind):
            return True
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return False


def _retry_after(headers: Mapping[str, str]) -> float:
    """Honour a provider's Retry-After (ms or s), capped so one reply cannot stall a call."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return min(MAX_BACKOFF_S, float(headers.get(name, "")) * scale)
        except ValueError:
            continue
    return 0.0


def clip(what: object, limit: int = 160) -> str:
    text = " ".join(str(what).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def redact(text: str, *secrets: str) -> str:
    """No key in a text, even one a provider echoes back: the given secrets, key-like words, a URL's userinfo."""
    for secret in secrets:
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return _USERINFO.sub("//***@", _KEYLIKE.sub("***", text))
