"""Fixtures shared by every test: settings isolated from the developer's environment."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Settings, load_settings

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
GITLAB_SCHEMA = SHARED / "gitlab" / "gitlab_schema.graphql"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No GITLAB_* / GATEWAY_* variable of the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("GITLAB_", "GATEWAY_")):
            monkeypatch.delenv(name)
    yield


@pytest.fixture
def make_settings(tmp_path: Path) -> Callable[..., Settings]:
    """``make_settings(gitlab={"url": ...}, broker={...})``: settings with state under tmp_path."""

    def make(**overrides: Any) -> Settings:
        overrides.setdefault("state_dir", str(tmp_path / "state"))
        gitlab = {
            "url": "https://gitlab.example.com",
            "token": "glpat-service-token",
            **overrides.pop("gitlab", {}),
        }
        return load_settings(gitlab=gitlab, **overrides)

    return make
