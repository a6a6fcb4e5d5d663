"""`rubricd serve dashboard`: how the command line starts the dashboard (no server needed)."""

import subprocess
import sys

import pytest

from rubricd_services.cli import serve
from rubricd_services.cli.__main__ import main, parser
from rubricd_services.dashboard import app


def test_serve_dashboard_hands_the_dashboard_its_flags_and_the_settings_overrides(monkeypatch):
    started = []
    monkeypatch.setattr(app, "main", lambda argv, **overrides: started.append((argv, overrides)))
    argv = ["--namespace", "ns1", "--redis-url", "redis://h:1/0", "serve", "dashboard", "--port", "9000"]
    assert main([*argv, "--refresh", "0.5"]) == 0
    assert started == [(["--port", "9000", "--refresh", "0.5"], {"namespace": "ns1", "redis_url": "redis://h:1/0"})]


def test_the_dashboard_keeps_its_defaults():
    args = app.parser().parse_args([])
    assert (args.host, args.port, args.refresh) == ("127.0.0.1", 8400, 2.0)


def test_the_dashboard_is_a_service_not_a_command_of_its_own(capsys):
    assert "dashboard" in serve.SERVERS
    with pytest.raises(SystemExit):
        parser().parse_args(["dashboard"])
    assert "invalid choice: 'dashboard'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--workers is for"):
        main(["serve", "dashboard", "--workers", "2"])


def test_the_dashboard_reads_through_the_state_not_the_command_line():
    probe = (
        "import sys, rubricd_services.dashboard.app, rubricd_services.dashboard.reader\n"
        "print(' '.join(sorted({m.split('.')[1] for m in sys.modules if m.startswith('rubricd_services.')})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert set(done.stdout.split()) <= {"dashboard", "state", "memory", "settings", "runtime", "llm"}
