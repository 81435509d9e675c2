"""``broker.database_url`` at start: clear refusals (exit 2, no stack trace) and a password that
never shows in a log line, ``--print-config`` or ``/metrics``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.e2e.harness import REPO, GatewayProcess, free_port
from tests.pg_server import PASSWORD

pytestmark = pytest.mark.e2e


def run(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB_", "GATEWAY_"))}
    return subprocess.run(
        [sys.executable, "-m", "gateway", "--port", str(free_port()), *args],
        cwd=REPO,
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


def test_unknown_scheme(tmp_path: Path) -> None:
    result = run({"GATEWAY_BROKER__DATABASE_URL": "mysql://u:wrong-pass-9876@h/db"}, tmp_path)
    refused(
        result, "configuration error: broker.database_url: scheme 'mysql' is not supported", "postgresql://"
    )


def test_wrong_credentials(tmp_path: Path, postgres_url: str) -> None:
    url = postgres_url.replace(PASSWORD, "wrong-pass-9876")
    result = run({"GATEWAY_BROKER__DATABASE_URL": url}, tmp_path)
    refused(result, "configuration error: broker.database_url", "refused the credentials")


def test_unreachable_host_is_retried_then_refused(tmp_path: Path) -> None:
    url = f"postgresql://u:wrong-pass-9876@127.0.0.1:{free_port()}/db"
    env = {"GATEWAY_BROKER__DATABASE_URL": url, "GATEWAY_BROKER__CONNECT_TIMEOUT_SECONDS": "1.5"}
    out = refused(run(env, tmp_path), "cannot reach PostgreSQL u@127.0.0.1", "broker.connect_timeout_seconds")
    assert "is not reachable yet" in out and "trying again in" in out  # the backoff is logged


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
    env = {"GATEWAY_BROKER__DATABASE_URL": postgres_url, "GATEWAY_LOGGING__LEVEL": "DEBUG"}
    printed = run(env, tmp_path, "--print-config")
    assert printed.returncode == 0 and PASSWORD not in printed.stdout
    assert "postgresql://postgres:***@127.0.0.1" in printed.stdout
    gateway = start_gateway(env=env)
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert "gateway_broker_state" in metrics and PASSWORD not in metrics
    gateway.stop()
    log = gateway.log()
    assert "broker database: PostgreSQL postgres@127.0.0.1" in log
    assert PASSWORD not in log
