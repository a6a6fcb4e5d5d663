"""Logging for every service: one JSON object per line on stderr, secrets masked."""

import logging
import sys
from urllib.parse import unquote, urlsplit

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from rubricd_services.llm import redact
from rubricd_services.settings import ServiceSettings

# Libraries that log a line per request at INFO.
_NOISY = ("httpx", "httpx2", "openai", "uvicorn.access")


class Redacted(logging.Formatter):
    """Formats with `inner`, then masks secrets in the whole line, tracebacks included:
    configured secrets (`secrets`), key-like words and passwords in URLs."""

    def __init__(self, inner: logging.Formatter, secrets: list[str]) -> None:
        super().__init__()
        self.inner, self.secrets = inner, secrets

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), *self.secrets)


def secrets(settings: ServiceSettings) -> list[str]:
    """Every secret the settings hold: the LLM API keys, the Redis password, the Weaviate API key."""
    keys = [settings.llm.api_key, *(settings.agent(a).api_key for a in settings.agents), settings.weaviate_api_key]
    found = [k.get_secret_value() for k in keys if k is not None]
    password = urlsplit(settings.redis_url).password
    return [*found, unquote(password)] if password else found


def configure_logging(settings: ServiceSettings) -> None:
    """One JSON object per line (RUBRICD_LOG_FORMAT=text for humans), secrets masked, on stderr."""
    inner: logging.Formatter
    if settings.log_format == "json":
        inner = JsonFormatter(
            "{asctime}{levelname}{name}{message}",
            style="{",
            rename_fields={"levelname": "level", "name": "logger"},
            reserved_attrs=[*RESERVED_ATTRS, "color_message"],
        )
    else:
        inner = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Redacted(inner, secrets(settings)))
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)
    # FastStream's logger has a coloured handler of its own: send its lines through ours.
    faststream_logger = logging.getLogger("faststream")
    faststream_logger.handlers.clear()
    faststream_logger.propagate = True
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
