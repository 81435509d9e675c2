"""At start the gateway asks GitLab once and logs one line: reachable? token accepted? (never fatal)."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from tests.e2e.harness import GatewayProcess
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

ON = {"GATEWAY_GITLAB__STARTUP_CHECK": "true"}


def startup_line(gateway: GatewayProcess, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in gateway.log().splitlines() if "GitLab" in line and " at http" in line]
        if lines:
            return lines[0]
        time.sleep(0.1)
    raise AssertionError(f"no startup check line in the log:\n{gateway.log()}")


def test_a_good_token_is_named_with_its_user(
    start_gateway: Callable[..., GatewayProcess], fresh_standin: Standin
) -> None:
    gateway = start_gateway(env=fresh_standin.env(**ON))
    line = startup_line(gateway)
    assert f"at {fresh_standin.url}: reachable, token accepted (user alice)" in line
    assert "INFO" in line
    assert fresh_standin.control.graphql_requests(operation="StartupCheck") == 1


def test_a_revoked_token_is_reported_and_the_gateway_serves(
    start_gateway: Callable[..., GatewayProcess], fresh_standin: Standin
) -> None:
    gateway = start_gateway(env=fresh_standin.env(token=ds.REVOKED_TOKEN, **ON))
    line = startup_line(gateway)
    assert "WARNING" in line and "check GITLAB_TOKEN" in line
    assert ds.REVOKED_TOKEN not in gateway.log()
    assert httpx.get(f"{gateway.url}/healthz").status_code == 200


def test_an_unreachable_gitlab_does_not_stop_the_start(start_gateway: Callable[..., GatewayProcess]) -> None:
    gateway = start_gateway(env={"GITLAB_URL": "http://127.0.0.1:9", **ON})
    line = startup_line(gateway)
    assert "Could not connect to GitLab at http://127.0.0.1:9 (connection refused): check gitlab.url" in line
    assert httpx.get(f"{gateway.url}/healthz").status_code == 200
    assert httpx.get(f"{gateway.url}/readyz").json()["gitlab"]["reachable"] is False


def test_a_url_that_is_not_gitlab_is_not_ready_and_readyz_says_what_the_log_says(
    start_gateway: Callable[..., GatewayProcess], fresh_standin: Standin
) -> None:
    wrong = f"{fresh_standin.url}/gitlab"  # GitLab is served at the root: a wrong sub-path
    gateway = start_gateway(env=fresh_standin.env(GITLAB_URL=wrong, **ON))
    line = startup_line(gateway)
    assert f"GitLab at {wrong} answered HTTP 404: check that GITLAB_URL is GitLab's address" in line
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 503
    body = ready.json()
    assert body["status"] == "not_ready" and body["state_store"] == "open"
    assert body["gitlab"] == {
        "url": wrong,
        "reachable": False,
        "state": "not_gitlab",
        "reason": body["reason"],
        "checked_at": body["gitlab"]["checked_at"],
    }
    assert line.endswith(body["reason"])
    assert httpx.get(f"{gateway.url}/healthz").status_code == 200  # alive: nothing to restart
