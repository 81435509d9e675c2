"""``broker.database_url`` read at start, before anything connects: a scheme the broker cannot use
is one clear refusal (exit 2, no stack trace, no password), and ``--print-config`` shows the URL
with its password masked. Run as ``main()`` in this process; what needs the database (wrong
credentials, an unreachable host, a newer schema) is tested against the installed gateway
(tests/e2e/test_broker_database_config.py)."""

from __future__ import annotations

import pytest

from gateway.__main__ import main
from tests.pg_server import PASSWORD


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setenv("GITLAB_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("GATEWAY_BROKER__DATABASE_URL", url)
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_unknown_scheme(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(monkeypatch, capsys, "mysql://u:wrong-pass-9876@h/db")
    both = out + err
    assert code == 2, both
    assert "Traceback" not in both
    assert PASSWORD not in both and "wrong-pass-9876" not in both
    assert (
        "configuration error: GATEWAY_BROKER__DATABASE_URL (broker.database_url): scheme 'mysql' is not "
        "supported"
    ) in both
    assert "postgresql://" in both


def test_print_config_masks_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    monkeypatch.setenv("GATEWAY_LOGGING__LEVEL", "DEBUG")
    code, out, _ = run(monkeypatch, capsys, postgres_url, "--print-config")
    assert code == 0 and PASSWORD not in out
    assert "postgresql://postgres:***@127.0.0.1" in out
