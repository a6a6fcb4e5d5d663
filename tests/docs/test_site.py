"""`make docs` on a copy of the docs with one mistake: the build fails, naming it (mkdocs --strict with
docs/hooks.py's checks); the real docs build in `make docs` itself (CI's first step)."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def build(tmp_path: Path, page: str) -> subprocess.CompletedProcess[str]:
    """`make docs` on a copy of docs/ with PAGE added as docs/added.md (its config the repo's, pointed at the copy)."""
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs, ignore=shutil.ignore_patterns("hooks.py", "__pycache__"))
    (docs / "added.md").write_text(page)
    config = (REPO / "mkdocs.yml").read_text()
    config = config.replace("docs_dir: docs\n", f"docs_dir: {docs}\n").replace(
        "site_dir: build/site\n", f"site_dir: {tmp_path / 'site'}\n"
    )
    config = config.replace("  - docs/hooks.py\n", f"  - {REPO / 'docs' / 'hooks.py'}\n")
    config = config.replace("  - development.md\n", "  - development.md\n  - added.md\n")
    (tmp_path / "mkdocs.yml").write_text(config)
    return subprocess.run(
        ["make", "-s", "docs", f"MKDOCS_CONFIG={tmp_path / 'mkdocs.yml'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("page", "named"),
    [
        ("# Fine\n\nA page with no mistake.\n", None),
        ("# Dead\n\nSee [the gone page](gone.md).\n", "contains a link 'gone.md', but the target is not found"),
        ("# Unknown\n\nSet `RUBRICD_NO_SUCH_SETTING=1`.\n", "RUBRICD_NO_SUCH_SETTING is read by no code"),
        ("# Command\n\nRun `rubricd frobnicate`.\n", "`rubricd frobnicate` is not a command"),
    ],
    ids=["fine", "dead-link", "unknown-setting", "unknown-command"],
)
def test_make_docs_fails_on_a_dead_link_an_unknown_setting_or_command(tmp_path, page, named):
    done = build(tmp_path, page)
    if named is None:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode != 0 and named in done.stderr, done.stdout + done.stderr
