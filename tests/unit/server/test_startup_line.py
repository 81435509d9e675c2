"""What the start-up log says of per-agent limits, tracing and who confirms."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from gateway.config import Settings
from gateway.observability.tracing import traces_endpoint
from gateway.server.serve import _log_what_needs_care, confirm_by_shown
from gateway.server.serve import limits_shown as _limits_shown
from tests.unit.signin.conftest import sign_in_settings


def test_the_start_up_line_says_whether_limits_are_on(make_settings: Callable[..., Settings]) -> None:
    assert _limits_shown(make_settings()) == "off"
    assert _limits_shown(make_settings(limits={"calls_per_second": 2.5})) == "2.5/s burst 3"
    own = [{"token": "dev-secret-0123456789ab", "agent_id": "dev", "calls_per_second": 1.0}]
    settings = make_settings(limits={"calls_per_second": 5, "burst": 20}, client_tokens=own)
    assert _limits_shown(settings) == "5/s burst 20; own limits for dev"


def test_the_tracing_line_says_where_spans_go() -> None:
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert traces_endpoint(base) == "http://collector:4318/v1/traces"
    full = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://otel.example.com/traces"}
    assert traces_endpoint(full) == "https://otel.example.com/traces"


def test_the_start_up_line_says_confirm_by_operator_when_set(make_settings: Callable[..., Settings]) -> None:
    assert confirm_by_shown(make_settings()) == {}
    assert confirm_by_shown(make_settings(confirm_by="operator")) == {"confirm_by": "operator"}


def test_the_console_line_names_gitlab_operators_and_viewers(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(
        console={"operators": ["alice"], "viewers": ["team"]},
        sign_in=sign_in_settings(),
    )
    with caplog.at_level(logging.INFO, logger="gateway"):
        _log_what_needs_care(settings)
    assert "broker console on for GitLab operators and GitLab viewers at" in caplog.text
