"""One request to GitLab at start, and one log line that says what it found.

A gateway pointed at the wrong URL, or given an expired token, otherwise only tells on the first
tool call, which an agent may make hours later. So at start the gateway sends one GraphQL query
(``operations/instance/startup_check.graphql``: ``currentUser`` and ``metadata { version
enterprise }``, GitLab's ``/api/graphql``) with its own token, and logs one line on the ``gateway``
logger:

- INFO ``GitLab 18.2.1 (EE) at https://gitlab.example.com: reachable, token accepted (user alice)``;
  on a GitLab older than the newest documents, the line goes on to say what differs there
  (``gateway.server.startup_check``);
- WARNING when GitLab is not reachable, refuses the token, or does not answer like GitLab,
  naming what to check (``GITLAB_URL``, ``GITLAB_TOKEN`` and its scope, ``gitlab.ca_bundle``);
  ``/readyz`` shows the same sentence as its ``reason``.

It never stops the gateway: GitLab may come up later, and the broker tools need no GitLab.
The request is sent once, without retries, in the background (``gateway.server.startup_check``
starts it once the app's services are up), so it does not delay serving. In
passthrough mode there is no gateway token: only reachability is checked.
``gitlab.startup_check = false`` turns the start-up line off; ``/readyz``
(``gateway.server.health``) sends the same check and reports what it found.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from gateway.gitlab.attempt_errors import NOT_SENT, UNREACHABLE_HINT, connect_failure, connect_hint
from gateway.gitlab.client import USER_AGENT, GitLabClient
from gateway.gitlab.connect_hints import tls_hint
from gateway.gitlab.credentials import service_credential
from gateway.gitlab.instance import InstanceInfo
from gateway.gitlab.operation_loader import load_operation, operation_name
from gateway.observability.logging import redact

#: The whole check, seconds: a GitLab slower than this to answer a trivial query is reported.
TIMEOUT_SECONDS = 15.0


#: What a check found: ``ok``; ``unreachable`` (no answer, or GitLab saying it is unavailable:
#: HTTP 5xx or 429); ``not_gitlab`` (something answered, but not GitLab's GraphQL API: a wrong
#: ``GITLAB_URL`` or sub-path); ``token_refused`` (GitLab answered and refused the token).
CheckState = Literal["ok", "unreachable", "not_gitlab", "token_refused"]


@dataclass(frozen=True)
class GitLabCheck:
    """What one check found.

    Attributes:
        state: see :data:`CheckState`.
        level: the logging level of ``line`` (INFO when ``ok``, else WARNING).
        line: one sentence naming the URL and, when not ``ok``, what to check. It never holds a
            token; it names the token's user and GitLab's version only when ``ok``.
        instance: GitLab's version and edition, when it told them (an authenticated check).
    """

    state: CheckState
    level: int
    line: str
    instance: InstanceInfo = field(default_factory=InstanceInfo)

    @property
    def reachable(self) -> bool:
        """True when GitLab answered as GitLab (even refusing the token)."""
        return self.state in ("ok", "token_refused")


async def check_gitlab(
    gitlab: GitLabClient, token: str | None, *, passthrough: bool, seconds: float = TIMEOUT_SECONDS
) -> GitLabCheck:
    """Send the check once (no retries) and say what it found; never raises."""
    url = redact(gitlab.base.url)
    credential = service_credential(None if passthrough else token)
    try:
        response = await gitlab.http.post(
            gitlab.base.graphql_url,
            json={"query": load_operation("startup_check"), "operationName": operation_name("startup_check")},
            headers={"User-Agent": USER_AGENT, **credential.headers()},
            timeout=seconds,
        )
    except httpx.HTTPError as exc:
        return _warn("unreachable", _unreachable(url, exc, seconds) + _SERVES_ANYWAY)
    status = response.status_code
    if status >= 500 or status == 429:
        return _warn(
            "unreachable",
            f"GitLab at {url} answered HTTP {status}: GitLab, or a proxy in front of it, is "
            "unavailable or overloaded" + _SERVES_ANYWAY,
        )
    if status in (401, 403) and passthrough:
        return GitLabCheck("ok", logging.INFO, f"GitLab at {url}: reachable; {_PASSTHROUGH}")
    if status in (401, 403):
        sent = "the token" if credential.token else "a request without a token"
        return _warn(
            "token_refused",
            f"GitLab at {url} refused {sent} (HTTP {status}): check GITLAB_TOKEN "
            "(expired, revoked, or without the api / read_api scope). GitLab tools fail until it is fixed",
        )
    data = _json(response)
    if status != 200 or data is None:
        moved = response.headers.get("location") if 300 <= status < 400 else None
        return _warn(
            "not_gitlab",
            f"GitLab at {url} answered HTTP {status}"
            + (f" (redirecting to {redact(moved)})" if moved else "")
            + ("" if data is not None else " without GitLab's JSON")
            + ": check that GITLAB_URL is GitLab's address (with its sub-path, if any)",
        )
    raw = data.get("data")
    fields: dict[str, Any] = raw if isinstance(raw, dict) else {}
    metadata = fields.get("metadata") or {}
    instance = InstanceInfo.of(metadata.get("version"), metadata.get("enterprise"))
    user = (fields.get("currentUser") or {}).get("username")
    if passthrough:
        return GitLabCheck(
            "ok", logging.INFO, f"{_named(instance, url)}: reachable; {_PASSTHROUGH}", instance
        )
    if not credential.token:
        return GitLabCheck(
            "ok",
            logging.INFO,
            f"{_named(instance, url)}: reachable; no GITLAB_TOKEN, so public projects only",
            instance,
        )
    if user is None:
        return _warn(
            "token_refused",
            f"GitLab at {url}: reachable, but the token was not accepted: check GITLAB_TOKEN "
            "(expired, revoked, or without the api / read_api scope)",
        )
    return GitLabCheck(
        "ok", logging.INFO, f"{_named(instance, url)}: reachable, token accepted (user {user})", instance
    )


_SERVES_ANYWAY = ". The gateway serves anyway; GitLab tools fail until it answers"
_PASSTHROUGH = "each caller's own token is used (passthrough)"


def _unreachable(url: str, exc: httpx.HTTPError, seconds: float) -> str:
    """The line for a check that got no answer, in the words and with the advice a failed tool
    call gives (``gateway.gitlab.attempt_errors``)."""
    tls = tls_hint(exc)
    if isinstance(exc, NOT_SENT):
        reason = connect_failure(exc, tls is not None)
        return f"Could not connect to GitLab at {url} ({reason}): {connect_hint(reason, tls)}"
    if isinstance(exc, httpx.TimeoutException):
        return f"GitLab at {url} did not answer within {seconds:g} s: {UNREACHABLE_HINT}"
    return f"GitLab at {url} is not reachable ({type(exc).__name__}): {tls or UNREACHABLE_HINT}"


def _warn(state: CheckState, line: str) -> GitLabCheck:
    return GitLabCheck(state, logging.WARNING, line)


def _named(instance: InstanceInfo, url: str) -> str:
    return f"{instance.label} at {url}" if instance.known else f"GitLab at {url}"


def _json(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
