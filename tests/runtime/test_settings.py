"""Settings: each agent's role defaults, explicit values winning over them, and a bad one named at start."""

import subprocess
import sys

import pytest

from rubricd.messages import PromotionPlan
from rubricd_services.arm.settings import ArmSettings
from rubricd_services.comparer.settings import ComparerSettings
from rubricd_services.scorer.settings import ScorerSettings
from rubricd_services.settings import AGENT_DEFAULTS, ServiceSettings, read_renamed
from rubricd_services.updater.settings import UpdaterSettings


def test_each_agent_gets_its_roles_defaults_unless_a_setting_says_otherwise(monkeypatch) -> None:
    settings = ServiceSettings()
    assert settings.agent("judge").timeout_s == 60 and settings.agent("updater").timeout_s == 300
    assert settings.agent("judge").max_tokens == 2048 and settings.agent("query_writer").max_tokens == 512
    assert settings.agent("judge").max_share == 1 and settings.agent("analyzer").max_share == 0.5
    assert settings.agent("embedder").max_tokens is None  # no role: `llm` as it is
    monkeypatch.setenv("RUBRICD_LLM__TIMEOUT_S", "7")
    monkeypatch.setenv("RUBRICD_AGENTS__UPDATER__TIMEOUT_S", "9")
    settings = ServiceSettings()
    assert settings.agent("judge").timeout_s == 7 and settings.agent("analyzer").timeout_s == 7  # llm wins
    assert settings.agent("updater").timeout_s == 9  # and the agent's own setting over both


def test_the_prompt_budget_is_the_window_less_the_answer() -> None:
    settings = ServiceSettings(llm={"context_tokens": 8192})
    assert settings.agent("judge").prompt_chars() == (8192 - 2048) * 2.5
    assert settings.agent("query_writer").prompt_chars() == (8192 - 512) * 2.5
    assert ServiceSettings().agent("judge").prompt_chars() is None  # no window: nothing is cut to fit
    assert set(AGENT_DEFAULTS) >= {"judge", "analyzer", "summarizer", "meta_summarizer", "query_writer", "updater"}


def test_an_answer_that_leaves_no_room_for_the_prompt_stops_the_service_naming_the_agent() -> None:
    with pytest.raises(ValueError, match="agent 'analyzer'.*max_tokens \\(2048, the agent's default unless set\\)"):
        ServiceSettings(llm={"context_tokens": 2048})
    with pytest.raises(ValueError, match="unknown agents \\['judeg'\\]"):  # a typo is named, not ignored
        ServiceSettings(agents={"judeg": {"model": "m"}})
    done = subprocess.run(
        [sys.executable, "-m", "rubricd_services.cli", "serve", "scorer"],
        env={"RUBRICD_LLM__CONTEXT_TOKENS": "4096", "RUBRICD_AGENTS__ANALYZER__MAX_TOKENS": "4000", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        cwd="services",
    )
    assert done.returncode != 0 and "invalid settings" in done.stderr
    assert "agent 'analyzer' (RUBRICD_LLM__*, RUBRICD_AGENTS__ANALYZER__*)" in done.stderr, done.stderr


def test_a_renamed_setting_s_old_name_is_read_as_its_new_one_and_both_differing_stop_the_service(capsys) -> None:
    environ = {"RUBRICD_MAX_DELIVERIES": "5", "RUBRICD_LOCK_TIMEOUT_S": "9"}
    read_renamed(environ)
    assert environ["RUBRICD_MAX_FAILURES"] == "5" and environ["RUBRICD_UPDATE_LOCK_S"] == "9"
    assert "RUBRICD_MAX_DELIVERIES is now RUBRICD_MAX_FAILURES" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="RUBRICD_MAX_DELIVERIES is now RUBRICD_MAX_FAILURES, and both are set"):
        read_renamed({"RUBRICD_MAX_DELIVERIES": "5", "RUBRICD_MAX_FAILURES": "3"})


def test_each_answering_service_reads_its_own_old_names_of_the_kept_settings(capsys) -> None:
    old = {
        ScorerSettings: ("RUBRICD_SCORE_TTL_S", "RUBRICD_RECORD_MAXLEN", "RUBRICD_RECORD_TTL_S"),
        ComparerSettings: ("RUBRICD_PREFERENCE_TTL_S", "RUBRICD_PREFERENCES_MAXLEN", "RUBRICD_PREFERENCES_TTL_S"),
        ArmSettings: ("RUBRICD_ARM_REWARD_TTL_S", "RUBRICD_ARM_KEPT_MAXLEN", "RUBRICD_ARM_KEPT_TTL_S"),
    }
    for cls, (ttl, maxlen, kept_ttl) in old.items():
        environ = {ttl: "120", maxlen: "0", kept_ttl: "600"}
        others = [n for c, names in old.items() if c is not cls for n in names]
        read_renamed(environ, cls.renamed)
        assert {k: environ[k] for k in ("RUBRICD_ANSWER_TTL_S", "RUBRICD_KEPT_MAXLEN", "RUBRICD_KEPT_TTL_S")} == {
            "RUBRICD_ANSWER_TTL_S": "120",
            "RUBRICD_KEPT_MAXLEN": "0",
            "RUBRICD_KEPT_TTL_S": "600",
        }
        assert not set(cls.renamed) & set(others)  # a service never reads another's old name
        assert f"{maxlen} is now RUBRICD_KEPT_MAXLEN" in capsys.readouterr().err
    for cls in old:  # 0 keeps nothing, in every one of them
        assert cls(kept_maxlen=0).kept_maxlen == 0


def test_a_promotion_setting_out_of_range_stops_the_updater_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rubricd_services.cli", "serve", "updater"],
        env={"RUBRICD_PROMOTION": "gated", "RUBRICD_SHADOW_STEPS": "0", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        cwd="services",
    )
    assert done.returncode != 0 and "invalid settings" in done.stderr
    assert "RUBRICD_SHADOW_STEPS" in done.stderr, done.stderr
    assert UpdaterSettings(promotion="gated", shadow_steps=2).promotion_plan() == PromotionPlan(
        promotion="gated", shadow_steps=2
    )
