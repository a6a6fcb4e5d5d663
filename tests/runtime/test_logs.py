"""Service logging: structured lines, and no secret in them, tracebacks included."""

import json
import logging
from collections.abc import Callable, Iterator

import pytest

from rubricd_services.runtime.logs import Redacted, configure_logging
from rubricd_services.settings import ServiceSettings

KEY = "sk-live-0123456789abcdef"


@pytest.fixture
def lines(capsys) -> Iterator[Callable[[], list[str]]]:
    def read() -> list[str]:
        return [line for line in capsys.readouterr().err.splitlines() if line.strip()]

    yield read
    logging.basicConfig(force=True)  # back to a plain root logger for the other tests


def test_lines_are_json_objects_with_level_logger_and_message(lines) -> None:
    configure_logging(ServiceSettings(log_format="json"))
    logging.getLogger("rubricd.test").warning("run %s step %d done", "r1", 3)
    [line] = lines()
    record = json.loads(line)
    assert (record["level"], record["logger"], record["message"]) == ("WARNING", "rubricd.test", "run r1 step 3 done")


def test_api_keys_and_url_passwords_never_reach_a_line(lines) -> None:
    configure_logging(
        ServiceSettings(
            log_format="json", llm={"api_key": "opaque-token-without-prefix"}, agents={"judge": {"api_key": KEY}}
        )
    )
    log = logging.getLogger("rubricd.test")
    log.error("calling with %s and opaque-token-without-prefix via redis://user:hunter2@host:6379/0", KEY)
    try:
        raise RuntimeError(f"provider echoed the key {KEY}")
    except RuntimeError:
        log.exception("failed")
    text = "\n".join(lines())
    for secret in (KEY, "opaque-token-without-prefix", "hunter2"):
        assert secret not in text
    assert "***" in text and "RuntimeError" in text  # the traceback is kept, masked


def test_text_format_for_a_terminal(lines) -> None:
    configure_logging(ServiceSettings(log_format="text"))
    logging.getLogger("rubricd.test").info("hello %s", KEY)
    [line] = lines()
    assert "INFO rubricd.test hello ***" in line and not line.startswith("{")


def test_redacted_wraps_any_formatter() -> None:
    formatter = Redacted(logging.Formatter("%(message)s"), [KEY])
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "key=%s", (KEY,), None)
    assert formatter.format(record) == "key=***"


def test_the_redis_password_and_the_weaviate_key_never_reach_a_line(lines) -> None:
    configure_logging(
        ServiceSettings(redis_url="rediss://scorer:p4ssw0rd-abc@host:6379/0", weaviate_api_key="wv-opaque-0123")
    )
    logging.getLogger("rubricd.test").error("refused p4ssw0rd-abc; weaviate said: bad key wv-opaque-0123")
    text = "\n".join(lines())
    assert "p4ssw0rd-abc" not in text and "wv-opaque-0123" not in text
    assert text.count("***") == 2
