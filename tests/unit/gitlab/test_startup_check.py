"""The startup check: one request to GitLab, one log line saying what to check (never fatal)."""

from __future__ import annotations

import logging
import ssl

import httpx
import pytest
import respx

from gateway.config import GitLabSettings
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.startup_check import check_gitlab
from gateway.observability.metrics import Metrics

GITLAB = "https://gitlab.example.com/gitlab"
GRAPHQL = f"{GITLAB}/api/graphql"
TOKEN = "glpat-startup-check-secret"


def answer(user: str | None, version: str | None = "18.2.1") -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "data": {
                "currentUser": {"username": user} if user else None,
                "metadata": {"version": version, "enterprise": True} if version else None,
            }
        },
    )


async def check(
    response: httpx.Response | Exception, token: str | None = TOKEN, **kw: bool
) -> tuple[int, str]:
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(GRAPHQL).mock(side_effect=[response])
        async with httpx.AsyncClient() as http:
            gitlab = GitLabClient(GitLabSettings(url=GITLAB), metrics=Metrics(), http=http)
            found = await check_gitlab(gitlab, token, passthrough=kw.get("passthrough", False))
    level, line = found.level, found.line
    assert route.call_count == 1  # one request, no retries
    sent = route.calls.last.request
    assert b"StartupCheck" in sent.content
    # GitLab's logs name the gateway, as for a tool call's requests (not python-httpx).
    assert sent.headers["User-Agent"].startswith("gitlab-mcp-gateway/")
    assert TOKEN not in line
    if token and not kw.get("passthrough"):
        assert sent.headers["PRIVATE-TOKEN"] == token
    else:
        assert "PRIVATE-TOKEN" not in sent.headers
    return level, line


async def test_reachable_and_the_token_accepted() -> None:
    assert await check(answer("alice")) == (
        logging.INFO,
        f"GitLab 18.2.1 (EE) at {GITLAB}: reachable, token accepted (user alice)",
    )


async def test_a_refused_token_says_what_to_check() -> None:
    level, line = await check(httpx.Response(401, json={"errors": [{"message": "Invalid token"}]}))
    assert level == logging.WARNING
    assert "refused the token (HTTP 401): check GITLAB_TOKEN" in line


async def test_a_token_gitlab_answers_as_anonymous_is_not_accepted() -> None:
    level, line = await check(answer(None, None))
    assert level == logging.WARNING
    assert line.startswith(
        f"GitLab at {GITLAB}: reachable, but the token was not accepted: check GITLAB_TOKEN"
    )


async def test_unreachable_names_the_url_and_says_it_serves_anyway() -> None:
    level, line = await check(httpx.ConnectError("connection refused"))
    assert level == logging.WARNING
    assert (
        f"Could not connect to GitLab at {GITLAB} (connection refused): check gitlab.url (GITLAB_URL)" in line
    )
    assert "serves anyway" in line


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (httpx.ConnectTimeout("timed out"), "Could not connect to GitLab at {} (connecting timed out)"),
        (httpx.ReadTimeout("timed out"), "GitLab at {} did not answer within 15 s"),
    ],
    ids=["connect-timeout", "no-answer"],
)
async def test_a_timeout_says_which_one(error: httpx.HTTPError, why: str) -> None:
    # The words a failed tool call uses, not the exception's class name.
    level, line = await check(error)
    assert level == logging.WARNING
    assert f"{why.format(GITLAB)}: check gitlab.url (GITLAB_URL)" in line


async def test_a_certificate_problem_points_at_the_ca_bundle() -> None:
    error = httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    error.__cause__ = ssl.SSLError()
    level, line = await check(error)
    assert level == logging.WARNING and "gitlab.ca_bundle" in line


async def test_https_to_a_plain_http_port_says_to_check_the_scheme() -> None:
    error = httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
    level, line = await check(error)
    assert level == logging.WARNING
    assert "does not speak TLS on that port: check whether GITLAB_URL should start with http://" in line
    assert "ca_bundle" not in line


@pytest.mark.parametrize(
    "response",
    [httpx.Response(200, text="<html>sign in</html>"), httpx.Response(404, text="Not Found")],
    ids=["html", "404"],
)
async def test_something_that_is_not_gitlab_says_check_the_url(response: httpx.Response) -> None:
    level, line = await check(response)
    assert level == logging.WARNING
    assert "check that GITLAB_URL is GitLab's address" in line


async def test_gitlab_unavailable_is_not_mistaken_for_a_wrong_url() -> None:
    level, line = await check(httpx.Response(502, text="<html>502 Bad Gateway</html>"))
    assert level == logging.WARNING
    assert line.startswith(
        f"GitLab at {GITLAB} answered HTTP 502: GitLab, or a proxy in front of it, is unavailable"
    )
    assert "GITLAB_URL" not in line and "serves anyway" in line


async def test_a_redirect_names_where_it_leads() -> None:
    moved = httpx.Response(301, headers={"Location": "https://gitlab.example.com/gitlab/api/graphql"})
    level, line = await check(moved)
    assert level == logging.WARNING
    assert "answered HTTP 301 (redirecting to https://gitlab.example.com/gitlab/api/graphql)" in line
    assert "check that GITLAB_URL is GitLab's address" in line


async def test_without_a_token_only_reachability() -> None:
    assert await check(answer(None, None), token=None) == (
        logging.INFO,
        f"GitLab at {GITLAB}: reachable; no GITLAB_TOKEN, so public projects only",
    )


async def test_passthrough_sends_no_token() -> None:
    level, line = await check(answer(None, None), passthrough=True)
    assert (level, line) == (
        logging.INFO,
        f"GitLab at {GITLAB}: reachable; each caller's own token is used (passthrough)",
    )


@pytest.mark.parametrize(
    ("url", "why"),
    [
        # Port 9 (discard): nothing listens there on a test machine (the e2e tests use it too).
        ("http://127.0.0.1:9", "(connection refused): check gitlab.url (GITLAB_URL), the network"),
        ("http://gitlab.invalid", "(host name not resolved): check the host name in gitlab.url"),  # RFC 2606
    ],
    ids=["refused", "unresolved"],
)
async def test_a_real_failed_connection_is_named_as_a_tool_call_names_it(url: str, why: str) -> None:
    # Through the gateway's own HTTP client (aiohttp underneath), not a mocked exception.
    gitlab = GitLabClient(GitLabSettings(url=url), metrics=Metrics())
    try:
        found = await check_gitlab(gitlab, TOKEN, passthrough=False, seconds=5)
    finally:
        await gitlab.aclose()
    assert found.state == "unreachable"
    assert f"Could not connect to GitLab at {url} {why}" in found.line
