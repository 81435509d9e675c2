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


@pytest.mark.spawns_process(reason="runs scripts/run, the README's start command, as a user does")
@pytest.mark.skipif(
    not INSTALLED.exists() or INSTALLED.stat().st_mtime < (REPO / "pyproject.toml").stat().st_mtime,
    reason="the checkout's .venv is not installed yet (scripts/test installs it); this test would install it",
)
def test_relative_paths_are_read_from_the_folder_it_was_started_in(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text("[server]\nport = 9123\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "GITLAB_"))}
    result = subprocess.run(
        [str(REPO / "scripts" / "run"), "--config", "mine.toml", "--print-config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config["server"]["port"] == 9123
    # Relative, so the broker's state lands in .pipeline/ of the caller's folder (README), not the checkout's.
    assert config["state_dir"] == ".pipeline"
