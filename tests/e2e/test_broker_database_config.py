"""``broker.database_url`` at start: clear refusals (exit 2, no stack trace) and a password that
never shows in a log line or ``/metrics``. What is decided before anything connects (a scheme the
broker cannot use, ``--print-config``) is tested in-process:
tests/unit/broker/test_database_url_options.py."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.e2e.harness import GatewayProcess, free_port, gateway_command
from tests.pg_server import PASSWORD

pytestmark = pytest.mark.e2e


def run(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB_", "GATEWAY_"))}
    return subprocess.run(
        [*gateway_command(), "--port", str(free_port()), *args],
        cwd=tmp_path,
        env={**base, "GATEWAY_STATE_DIR": str(tmp_path / "state"), "GITLAB_URL": "http://127.0.0.1:9", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def refused(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out
    assert PASSWORD not in out and "wrong-pass-9876" not in out
    for text in expected:
        assert text in out, out
    return out


def test_wrong_credentials(tmp_path: Path, postgres_url: str) -> None:
    url = postgres_url.replace(PASSWORD, "wrong-pass-9876")
    result = run({"GATEWAY_BROKER__DATABASE_URL": url}, tmp_path)
    refused(result, "configuration error: broker.database_url", "refused the credentials")


def test_unreachable_host_is_retried_then_refused(tmp_path: Path) -> None:
    url = f"postgresql://u:wrong-pass-9876@127.0.0.1:{free_port()}/db"
    env = {"GATEWAY_BROKER__DATABASE_URL": url, "GATEWAY_BROKER__CONNECT_TIMEOUT_SECONDS": "1.5"}
    out = refused(run(env, tmp_path), "cannot reach PostgreSQL u@127.0.0.1", "broker.connect_timeout_seconds")
    assert "is not reachable yet" in out and "trying again in" in out  # the backoff is logged


@pytest.mark.parametrize(
    ("query", "driver_says"),
    [
        ("connect_timeout_s=5", 'invalid connection option "connect_timeout_s"'),
        ("sslmode=require", "server does not support SSL, but SSL was required"),
    ],
)
def test_a_url_option_no_wait_can_fix_is_refused_at_once(
    tmp_path: Path, postgres_url: str, query: str, driver_says: str
) -> None:
    # Retried as a server not up yet, it took broker.connect_timeout_seconds (60 s) to be told.
    env = {
        "GATEWAY_BROKER__DATABASE_URL": f"{postgres_url}?{query}",
        "GATEWAY_BROKER__CONNECT_TIMEOUT_SECONDS": "600",
    }
    for args in ((), ("--migrate",)):
        out = refused(run(env, tmp_path, *args), "cannot be used with the URL's options", driver_says)
        assert "is not reachable yet" not in out


def test_newer_schema(
    tmp_path: Path, postgres_url: str, start_gateway: Callable[..., GatewayProcess]
) -> None:
    start_gateway(env={"GATEWAY_BROKER__DATABASE_URL": postgres_url}).stop()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    result = run({"GATEWAY_BROKER__DATABASE_URL": postgres_url}, tmp_path)
    refused(result, "schema revision 9999, newer than this gateway's")


def test_password_is_in_no_log_line_print_config_or_metrics(
    tmp_path: Path, postgres_url: str, start_gateway: Callable[..., GatewayProcess]
) -> None:
    # --print-config masks it too: tests/unit/broker/test_database_url_options.py
    env = {"GATEWAY_BROKER__DATABASE_URL": postgres_url, "GATEWAY_LOGGING__LEVEL": "DEBUG"}
    gateway = start_gateway(env=env)
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert "gateway_broker_state" in metrics and PASSWORD not in metrics
    gateway.stop()
    log = gateway.log()
    assert "broker database: PostgreSQL postgres@127.0.0.1" in log
    assert PASSWORD not in log


def test_failed_migration_stops_the_start_with_one_clear_line(tmp_path: Path, postgres_url: str) -> None:
    """A migration that fails (0003 meets a column someone added by hand): exit status 1, what
    failed in one line, no stack trace, no password; ``--migrate`` says the same."""
    from gateway.broker import migrate
    from gateway.broker.database import engine_url

    migrate.upgrade(engine_url(postgres_url, tmp_path), to="0002")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE agents ADD COLUMN acknowledges INTEGER")
    env = {"GATEWAY_BROKER__DATABASE_URL": postgres_url}
    for args, prefix in (((), "cannot start"), (("--migrate",), "cannot migrate")):
        result = run(env, tmp_path, *args)
        out = result.stdout + result.stderr
        assert result.returncode == 1, out
        assert "Traceback" not in out and PASSWORD not in out
        assert f"{prefix}: PostgreSQL " in out, out
        assert "migrating the broker schema from revision 0002 failed" in out
        assert 'column "acknowledges" of relation "agents" already exists' in out


def test_migrate_brings_the_schema_up_to_date_and_exits(tmp_path: Path, postgres_url: str) -> None:
    """``--migrate`` as a deployment step: migrates, says so, exits 0; again: nothing to do."""
    from gateway.broker.migrations import HEAD

    env = {"GATEWAY_BROKER__DATABASE_URL": postgres_url}
    first = run(env, tmp_path, "--migrate")
    assert first.returncode == 0, first.stderr
    assert f": migrated (none: new) → {HEAD} in " in first.stdout, first.stdout
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (HEAD,)
    again = run(env, tmp_path, "--migrate")
    assert again.returncode == 0 and again.stdout.endswith(f": already at {HEAD}, nothing to do\n"), (
        again.stdout
    )
    assert PASSWORD not in first.stdout + first.stderr + again.stdout + again.stderr
