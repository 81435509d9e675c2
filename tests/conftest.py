"""Fixtures shared by every test: settings isolated from the developer's environment."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Settings, load_settings
from gateway.observability.logging import _HANDLER_MARK as GATEWAY_HANDLER_MARK
from gateway.tools.registry import Registry, Tool, ToolResult
from tests import pg_server
from tests.shipped import shipped

REPO = Path(__file__).resolve().parent.parent
#: GitLab's published GraphQL schema (SDL), kept in the repository: see tests/gitlab/README.md.
GITLAB_SCHEMA = REPO / "tests" / "gitlab" / "gitlab_schema.graphql"
#: Names a second schema file (your own GitLab's, from scripts/refresh-gitlab-schema) that the
#: GraphQL documents are checked against too.
EXTRA_SCHEMA_ENV = "GITLAB_SCHEMA_FILE"
#: A test marked slow gets this timeout instead of pyproject's default (60 s).
SLOW_TEST_TIMEOUT_SECONDS = 600


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, with one message, when a file the tests cannot do without is missing."""
    missing = [path for path in (GITLAB_SCHEMA,) if not path.is_file()]
    extra = os.environ.get(EXTRA_SCHEMA_ENV)
    if extra and not Path(extra).is_file():
        missing.append(Path(extra))
    if missing:
        pytest.exit(
            "missing: "
            + ", ".join(str(p) for p in missing)
            + f". GitLab's schema is part of the repository (tests/gitlab/): restore it with "
            f"`git checkout -- tests/gitlab`; {EXTRA_SCHEMA_ENV} must name an existing SDL file "
            "(scripts/refresh-gitlab-schema writes one).",
            returncode=4,
        )


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """A test marked ``both_loops`` runs on asyncio's event loop and on uvloop's, the one the
    gateway runs on by default (``server.event_loop``); every other async test on asyncio's."""
    factories: dict[str, Any] = {"asyncio": asyncio.new_event_loop}
    if item.get_closest_marker("both_loops") is not None:
        try:
            import uvloop
        except ImportError:  # not built for this platform: the asyncio run still counts
            pass
        else:
            factories["uvloop"] = uvloop.new_event_loop
    return factories


#: Tests that run what ships (tests/shipped.py): the installed wheel, the distributions, the image.
SHIPPED_TESTS = ("tests/e2e/", "tests/container/", "tests/unit/test_packaging.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A slow test without a timeout of its own gets the longer one; when a test that runs what
    ships was selected, the wheel is built and installed now (once per run, unless scripts/test
    did it), before any test's timeout starts."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT_SECONDS))
    if any(item.nodeid.startswith(SHIPPED_TESTS) for item in items):
        shipped()


@pytest.fixture(autouse=True)
def _no_gateway_log_handler_outlives_its_test() -> Iterator[None]:
    """``main()`` sends logs to the stderr of its moment, a test's capture: a handler left behind
    would write a later test's records to a closed stream ("--- Logging error ---")."""
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, GATEWAY_HANDLER_MARK, False)]:
        root.removeHandler(handler)
    # A library's dictConfig() disables every logger that exists (``disable_existing_loggers``):
    # the log tests that this worker runs later would see nothing, far from the cause.
    if logging.getLogger("gateway").disabled:
        logging.getLogger("gateway").disabled = False
        pytest.fail("this test left the gateway's logger disabled (a logging.config.dictConfig call?)")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No GITLAB_* / GATEWAY_* variable of the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("GITLAB_", "GATEWAY_")):
            monkeypatch.delenv(name)
    yield


_VALIDATORS: dict[type, Any] = {}


@pytest.fixture(autouse=True)
def _results_match_their_output_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tool result a test produces in-process, success or error, is checked against the
    ``outputSchema`` agents were given (JSON Schema, as clients such as the MCP Inspector check it):
    a result that does not match is a test failure, not something an agent finds."""
    from jsonschema import Draft202012Validator

    call = Registry.call

    async def checked(self: Registry, tool: Tool, *args: Any, **kwargs: Any) -> ToolResult:
        result = await call(self, tool, *args, **kwargs)
        if tool.output_model is not None:
            validator = _VALIDATORS.get(tool.output_model)
            if validator is None:  # once per output model (the schema derives from it alone)
                validator = _VALIDATORS[tool.output_model] = Draft202012Validator(tool.output_schema() or {})
            error = next(iter(validator.iter_errors(result.structured)), None)
            assert error is None, f"{tool.name} answered outside its outputSchema: {error.message}"
        return result

    monkeypatch.setattr(Registry, "call", checked)


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


@pytest.fixture(scope="session")
def broker_at_head_sqlite() -> Path:
    """A SQLite broker database at the newest schema, made once per run.

    A gateway migrates a new database in a child process (about 0.8 s of CPU): copied into a
    test's state folder, this file spares the broker tests that cost. The migrations themselves
    are tested on new databases in tests/unit/broker/test_store.py.
    """
    from tests.e2e.harness import migrated_sqlite_broker

    return migrated_sqlite_broker()


@pytest.fixture
def at_head(broker_at_head_sqlite: Path) -> Callable[[Settings], Settings]:
    """``at_head(settings)`` → ``settings``, their SQLite broker database (``state_dir/broker.db``)
    first made a copy of :func:`broker_at_head_sqlite` when there is none yet: an app built on
    them opens its broker without migrating (no child process). Settings naming a PostgreSQL
    database are returned as they are."""

    def place(settings: Settings) -> Settings:
        if settings.broker.database_url is None:
            database = Path(settings.state_dir) / "broker.db"
            if not database.exists():
                database.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(broker_at_head_sqlite, database)
        return settings

    return place


@pytest.fixture(scope="session")
def broker_at_head_postgres(postgres: pg_server.PostgresServer) -> str:
    """A PostgreSQL database at the newest schema, made once per run: the template of
    :func:`broker_database_at_head`'s databases."""
    from gateway.broker import migrate
    from gateway.broker.database import engine_url

    name = postgres.create_database()
    migrate.upgrade(engine_url(postgres.url(name), Path()))
    return name


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


@pytest.fixture
def broker_database_at_head(
    broker_backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[str | None]:
    """As :func:`broker_database`, with its schema already at the newest migration, as after the
    gateway's first start: a copy of a database migrated once per run. For SQLite (None) the copy
    is ``tmp_path/state/broker.db``, the file of ``make_settings``'s state folder."""
    if broker_backend == "sqlite":
        state = tmp_path / "state"
        state.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(request.getfixturevalue("broker_at_head_sqlite"), state / "broker.db")
        yield None
        return
    yield request.getfixturevalue("postgres_url_at_head")


@pytest.fixture
def postgres_url_at_head(postgres: pg_server.PostgresServer, broker_at_head_postgres: str) -> Iterator[str]:
    """As :func:`postgres_url`, a copy of :func:`broker_at_head_postgres`: a database already at
    the newest schema, dropped after the test."""
    name = postgres.create_database(template=broker_at_head_postgres)
    try:
        yield postgres.url(name)
    finally:
        postgres.drop_database(name)
