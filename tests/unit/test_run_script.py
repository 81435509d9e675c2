"""``scripts/run``, the README's start command, started from another folder: a relative ``--config``
is the caller's file, not one in the checkout."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALLED = REPO / ".venv" / ".installed"


RUNS = pytest.mark.spawns_process(reason="runs scripts/run, the README's start command, as a user does")
INSTALLED_ALREADY = pytest.mark.skipif(
    not INSTALLED.exists() or INSTALLED.stat().st_mtime < (REPO / "pyproject.toml").stat().st_mtime,
    reason="the checkout's .venv is not installed yet (scripts/test installs it); this test would install it",
)


def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "GITLAB_"))}
    return subprocess.run(
        [str(REPO / "scripts" / "run"), *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@RUNS
@INSTALLED_ALREADY
def test_relative_paths_are_read_from_the_folder_it_was_started_in(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text("[server]\nport = 9123\n")
    result = run(tmp_path, "--config", "mine.toml", "--print-config")
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config["server"]["port"] == 9123
    # Relative, so the broker's state lands in .pipeline/ of the caller's folder (README), not the checkout's.
    assert config["state_dir"] == ".pipeline"


@RUNS
@INSTALLED_ALREADY
@pytest.mark.skipif(not (REPO / ".git").exists(), reason="not a git checkout: there is no revision to show")
def test_a_checkout_says_which_commit_it_runs(tmp_path: Path) -> None:
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    result = run(tmp_path, "--version")
    assert result.returncode == 0, result.stderr
    assert f"(revision {commit}" in result.stdout, result.stdout
