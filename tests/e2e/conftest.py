"""E2E fixtures: the GitLab stand-in and the gateway as real processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.gitlab_bands import band, band_matrix, gitlab_band  # noqa: F401  (fixtures)
from tests.e2e.harness import GatewayProcess
from tests.standin.fixtures import (  # noqa: F401  (fixtures)
    fresh_standin,
    fresh_standin_subpath,
    standin,
    standin_subpath,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """``start_gateway(env={...}, args=[...])`` → a started :class:`GatewayProcess`, stopped at teardown."""
    started: list[GatewayProcess] = []

    def start(
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        state_dir: Path | None = None,
        port: int | None = None,
    ) -> GatewayProcess:
        proc = GatewayProcess(env=env or {}, state_dir=state_dir or tmp_path / "state", args=args, port=port)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def broker_env(broker_database_at_head: str | None) -> dict[str, str]:
    """The gateway environment that puts its broker on the test's backend (SQLite or PostgreSQL),
    its schema already migrated (a SQLite file in ``start_gateway``'s default state folder)."""
    url = broker_database_at_head
    return {} if url is None else {"GATEWAY_BROKER__DATABASE_URL": url}
