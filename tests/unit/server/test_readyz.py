"""``/readyz``: ready unless the broker's database is closed or GITLAB_URL is not a GitLab at all."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.cache import CacheRegistry
from gateway.config import Settings
from gateway.gitlab.client import GitLabClient
from gateway.observability.metrics import Metrics
from gateway.server import health
from gateway.server.services import SERVICES, Services
from gateway.server.startup_check import check_gitlab_at_start

GITLAB = "https://gitlab.example.com/gitlab"
TOKEN = "glpat-service-token"


class GitLab:
    """A GitLab stand-in answering the readiness check with ``self.answer``."""

    def __init__(self) -> None:
        self.answer: httpx.Response | Exception = _graphql("alice")
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _graphql(user: str | None) -> httpx.Response:
    current = {"username": user} if user else None
    return httpx.Response(200, json={"data": {"currentUser": current, "metadata": {"version": "18.2.1"}}})


@pytest.fixture
def gitlab() -> GitLab:
    return GitLab()


class Broker:
    """The broker as ``/readyz`` sees it: open or not."""

    open = True
    #: What the database check finds: None when it answers.
    failure: str | None = None

    def is_open(self) -> bool:
        return self.open

    async def database_failure(self, seconds: float) -> str | None:
        return self.failure


@dataclass
class Readyz:
    """``await readyz()`` → ``(HTTP status, body)``."""

    client: TestClient[Any, Any]
    broker: Broker
    metrics: Metrics

    async def __call__(self) -> tuple[int, dict[str, Any]]:
        response = await self.client.get("/readyz")
        return response.status, await response.json()


@pytest.fixture
def watch_every() -> float | None:
    """Seconds between the gateway's own checks of GitLab (None: it does not check on its own)."""
    return None


@pytest.fixture
def start_check() -> bool:
    """The app sends the start-up check (and then checks GitLab on its own), as a gateway does."""
    return False


@pytest.fixture
async def readyz(
    aiohttp_client: Any,
    make_settings: Callable[..., Settings],
    gitlab: GitLab,
    monkeypatch: pytest.MonkeyPatch,
    watch_every: float | None,
    start_check: bool,
) -> AsyncIterator[Readyz]:
    """A ``/readyz`` that asks GitLab at each call (no 30 s reuse)."""
    monkeypatch.setattr(health, "GITLAB_CHECK_TTL", 0.0)
    settings = make_settings(gitlab={"url": GITLAB, "token": TOKEN})
    metrics, broker = Metrics(), Broker()
    async with httpx.AsyncClient(transport=httpx.MockTransport(gitlab)) as gitlab_http:
        app = web.Application()
        health.setup(app)
        if watch_every is not None:
            health.watch_gitlab(app, watch_every)
        if start_check:
            check_gitlab_at_start(app, settings)
        app[SERVICES] = Services(
            settings=settings,
            gitlab=GitLabClient(settings.gitlab, metrics=metrics, http=gitlab_http),
            caches=CacheRegistry(enabled=False, max_entries=1, metrics=metrics),
            metrics=metrics,
            broker=cast(Any, broker),
        )
        yield Readyz(await aiohttp_client(app), broker, metrics)


async def test_a_gitlab_that_accepts_the_token_is_ready(readyz: Readyz, gitlab: GitLab) -> None:
    status, body = await readyz()
    assert status == 200
    assert body["status"] == "ready" and "reason" not in body
    assert body["gitlab"]["url"] == GITLAB
    assert body["gitlab"]["reachable"] is True and body["gitlab"]["state"] == "ok"
    assert "alice" not in str(body)  # the token's user is for the log, not an unauthenticated page
    assert gitlab.requests[-1].url == f"{GITLAB}/api/graphql"
    assert gitlab.requests[-1].headers["PRIVATE-TOKEN"] == TOKEN


@pytest.mark.gitlab_version(None)
async def test_readyz_names_the_version_and_edition_gitlab_told(readyz: Readyz, gitlab: GitLab) -> None:
    gitlab.answer = httpx.Response(
        200,
        json={
            "data": {
                "currentUser": {"username": "alice"},
                "metadata": {"version": "17.5.2-ee", "enterprise": True},
            }
        },
    )
    _, body = await readyz()
    # The version plain, the edition apart: as the metric and the log lines say them.
    assert (body["gitlab"]["version"], body["gitlab"]["edition"]) == ("17.5.2", "ee")


async def test_checked_at_is_iso_8601_utc_like_the_brokers_times(readyz: Readyz) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    _, body = await readyz()
    checked_at = body["gitlab"]["checked_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", checked_at), checked_at
    when = datetime.strptime(checked_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before <= when <= datetime.now(UTC) + timedelta(seconds=1)


@pytest.mark.parametrize(
    "answer",
    [httpx.Response(404, text="<html>Not Found</html>"), httpx.Response(200, text="<html>Sign in</html>")],
    ids=["404-html", "200-html"],
)
async def test_an_address_that_is_not_a_gitlab_is_not_ready_and_says_what_to_check(
    readyz: Readyz, gitlab: GitLab, answer: httpx.Response
) -> None:
    gitlab.answer = answer
    status, body = await readyz()
    assert status == 503
    assert body["status"] == "not_ready" and body["state_store"] == "open"
    assert body["gitlab"]["reachable"] is False and body["gitlab"]["state"] == "not_gitlab"
    assert "check that GITLAB_URL is GitLab's address (with its sub-path, if any)" in body["reason"]
    assert body["gitlab"]["reason"] == body["reason"]


@pytest.mark.parametrize(
    ("answer", "state"),
    [
        (httpx.ConnectError("connection refused"), "unreachable"),
        (httpx.Response(502, text="<html>Bad Gateway</html>"), "unreachable"),
        (httpx.Response(401, json={"errors": [{"message": "Invalid token"}]}), "token_refused"),
        (httpx.Response(403, text="Forbidden"), "token_refused"),
        (_graphql(None), "token_refused"),
    ],
    ids=["connection-refused", "502", "401", "403", "anonymous"],
)
async def test_gitlab_down_or_refusing_the_token_is_reported_but_still_ready(
    readyz: Readyz, gitlab: GitLab, answer: httpx.Response | Exception, state: str
) -> None:
    gitlab.answer = answer
    status, body = await readyz()
    assert (status, body["status"], body["gitlab"]["state"]) == (200, "ready", state)
    assert body["gitlab"]["reachable"] is (state == "token_refused")
    assert "GITLAB_" in body["gitlab"]["reason"] or "unavailable" in body["gitlab"]["reason"]
    assert TOKEN not in str(body)


async def test_once_gitlab_answered_an_odd_answer_does_not_flip_readiness(
    readyz: Readyz, gitlab: GitLab
) -> None:
    assert (await readyz())[0] == 200
    gitlab.answer = httpx.Response(404, text="<html>Not Found</html>")  # e.g. a proxy's error page
    status, body = await readyz()
    assert (status, body["status"], body["gitlab"]["state"]) == (200, "ready", "not_gitlab")


async def test_the_check_is_reused_for_30_seconds(
    readyz: Readyz, gitlab: GitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "GITLAB_CHECK_TTL", 30.0)
    first = (await readyz())[1]
    second = (await readyz())[1]
    assert len(gitlab.requests) == 1
    assert first["gitlab"]["checked_at"] == second["gitlab"]["checked_at"]


async def test_a_closed_broker_database_is_not_ready(readyz: Readyz) -> None:
    readyz.broker.open = False
    status, body = await readyz()
    assert (status, body["status"], body["state_store"]) == (503, "not_ready", "closed")
    assert body["reason"].startswith("the broker's database is closed")
    assert body["gitlab"]["state"] == "ok"


async def test_a_database_that_does_not_answer_is_reported_and_the_pod_stays_ready(
    readyz: Readyz,
) -> None:
    readyz.broker.failure = "the broker database PostgreSQL gw@db:5432/broker failed: connection refused"
    status, body = await readyz()
    assert (status, body["status"], body["state_store"]) == (200, "ready", "unreachable")
    assert body["state_store_reason"] == readyz.broker.failure
    assert "reason" not in body
    readyz.broker.failure = None
    status, body = await readyz()
    assert (status, body["state_store"]) == (200, "open")
    assert "state_store_reason" not in body


def _reachable(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("gateway_gitlab_reachable")


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("watch_every", [0.01])
async def test_an_outage_shows_on_the_gauge_and_in_the_log_without_any_traffic(
    readyz: Readyz, gitlab: GitLab, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    # Nobody asks /readyz or calls a tool: the gateway checks on its own.
    await _until(lambda: _reachable(readyz.metrics) == 1 and len(gitlab.requests) >= 2)
    checked = readyz.metrics.registry.get_sample_value("gateway_gitlab_last_check_timestamp_seconds")
    assert checked is not None and checked > 0
    assert _warnings(caplog) == []  # steady: nothing to say

    gitlab.answer = httpx.ConnectError("connection refused")
    await _until(lambda: _reachable(readyz.metrics) == 0)
    seen = len(gitlab.requests)
    await _until(lambda: len(gitlab.requests) >= seen + 3)  # still down: said once
    down = _warnings(caplog)
    assert len(down) == 1
    # GitLab down leaves the pod ready (the broker tools still work): no readiness flip to say.
    assert readyz.metrics.registry.get_sample_value("gateway_ready") == 1
    assert down[0].startswith(f"GitLab became unreachable: Could not connect to GitLab at {GITLAB}")

    gitlab.answer = _graphql("alice")
    await _until(lambda: _reachable(readyz.metrics) == 1)
    back = _warnings(caplog)[1:]
    assert back == [
        f"GitLab is reachable again: GitLab 18.2.1 (CE) at {GITLAB}: reachable, token accepted (user alice)"
    ]
    assert all(TOKEN not in line for line in _warnings(caplog))


async def test_a_readiness_flip_is_logged_both_ways(readyz: Readyz, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    assert (await readyz())[0] == 200
    assert (await readyz())[0] == 200
    assert _warnings(caplog) == []
    readyz.broker.open = False
    assert (await readyz())[0] == 503
    assert (await readyz())[0] == 503
    assert readyz.metrics.registry.get_sample_value("gateway_ready") == 0
    readyz.broker.open = True
    assert (await readyz())[0] == 200
    assert _warnings(caplog) == [
        "readiness: not ready (/readyz answers 503): the broker's database is closed: the gateway is "
        "stopping, or lost it (see the log)",
        "readiness: ready again (/readyz answers 200)",
    ]
    assert readyz.metrics.registry.get_sample_value("gateway_ready") == 1


@pytest.mark.parametrize("start_check", [True])
async def test_the_start_up_check_is_the_first_check_and_the_next_follows_15_s_later(
    readyz: Readyz, gitlab: GitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _until(lambda: _reachable(readyz.metrics) == 1)  # right from the start-up check
    assert len(gitlab.requests) == 1
    monkeypatch.setattr(health, "GITLAB_CHECK_TTL", 30.0)
    status, body = await readyz()
    assert (status, body["gitlab"]["state"]) == (200, "ok")
    assert len(gitlab.requests) == 1  # /readyz reused it: one request at start, not two
    assert health.GITLAB_PROBE_SECONDS == 15.0  # the next, on its own
