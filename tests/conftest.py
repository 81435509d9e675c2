"""Fixtures shared by every test: settings isolated from the developer's environment."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Settings, load_settings
from tests import pg_server

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


@pytest.fixture(scope="session")
def postgres() -> Iterator[pg_server.PostgresServer]:
    """One PostgreSQL 15 server for the whole run (started on first use, stopped at the end).

    Skipped without Debian's ``postgresql-15`` outside CI; under CI (``CI`` set) a missing server
    fails the run, since ``scripts/install-test-tools`` installs it.
    """
    if not pg_server.available():
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL 15 is not installed: run scripts/install-test-tools")
        pytest.skip("PostgreSQL 15 (Debian's postgresql-15) is not installed: run scripts/install-test-tools")
    server = pg_server.PostgresServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres: pg_server.PostgresServer) -> Iterator[str]:
    """A fresh empty database on the session's server, dropped after the test."""
    name = postgres.create_database()
    try:
        yield postgres.url(name)
    finally:
        postgres.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def broker_backend(request: pytest.FixtureRequest) -> str:
    """Each broker test runs on both backends."""
    return str(request.param)


@pytest.fixture
def broker_database(broker_backend: str, request: pytest.FixtureRequest) -> str | None:
    """``broker.database_url`` for the test's backend: None (SQLite file) or a fresh PostgreSQL database."""
    if broker_backend == "sqlite":
        return None
    return str(request.getfixturevalue("postgres_url"))
