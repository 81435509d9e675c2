"""What one GitLab attempt that failed before its answer came is called, for the buffered path
(``gateway.gitlab.client``) and the streaming one (``gateway.gitlab.streaming``) alike."""

from __future__ import annotations

import errno
import socket

import httpx

from gateway.gitlab.call import GitLabCall, Transient
from gateway.gitlab.connect_hints import tls_hint
from gateway.gitlab.errors import GitLabError, GitLabUpstreamError

#: Failures before the request left: safe to send again, a mutation included.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: What to check when GitLab cannot be reached at all (no TLS clue).
UNREACHABLE_HINT = (
    "check gitlab.url (GITLAB_URL), the network and proxy settings (HTTPS_PROXY, NO_PROXY) between "
    "the gateway and GitLab, and that GitLab is up"
)
#: What the agent reading the error can do itself (the hint before it is for the operator).
AGENT_ADVICE = (
    "Nothing reached GitLab, so calling again is safe; if it keeps failing, tell the gateway's "
    "operator, who can fix the above"
)
#: Where gitlab.com says it is down; named only when gitlab.url is gitlab.com.
GITLAB_COM_STATUS = " (https://status.gitlab.com)"
#: What to check when GitLab's host name does not resolve.
UNRESOLVED_HINT = (
    "check the host name in gitlab.url (GITLAB_URL), and that the gateway's DNS resolves it (or "
    "HTTPS_PROXY, when GitLab is reached through a proxy)"
)
#: Words of resolver failures in the errors of getaddrinfo and aiohttp's DNS error.
_DNS_WORDS = ("dnserror", "name or service not known", "nodename nor servname", "name resolution")


def not_connected(call: GitLabCall, base_url: str, exc: BaseException) -> Transient:
    """An attempt that never reached GitLab (no connection): retried briefly unless a TLS failure
    says another try would fail the same way; the final error says what failed, how many
    attempts over how long, and what to check."""
    tls = tls_hint(exc)
    reason = connect_failure(exc, tls is not None)
    hint = connect_hint(reason, tls)
    if hint == UNREACHABLE_HINT and httpx.URL(base_url).host == "gitlab.com":
        hint += GITLAB_COM_STATUS

    def final(attempts: int, seconds: float) -> GitLabError:
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts over {seconds:.1f} s"
        return GitLabUpstreamError(
            f"Could not connect to GitLab at {base_url} ({reason}; {tries}): {hint}. {AGENT_ADVICE}.",
            request_id=call.request_id,
        )

    return Transient(final(1, 0.0), unreached=final, retry=tls is None)


def connect_hint(reason: str, tls: str | None) -> str:
    """What to check for a connection that failed for ``reason`` (:func:`connect_failure`);
    ``tls``: :func:`~gateway.gitlab.connect_hints.tls_hint`'s advice, when it had any."""
    if tls is not None:
        return tls
    return UNRESOLVED_HINT if reason == "host name not resolved" else UNREACHABLE_HINT


def connect_failure(exc: BaseException, tls: bool) -> str:
    """A few words on why no connection was made (never the URL's credentials: there are none,
    the base URL refuses them)."""
    if isinstance(exc, httpx.PoolTimeout):
        return "no free connection in time"
    if isinstance(exc, httpx.ConnectTimeout):
        return "connecting timed out"
    if tls:
        return "TLS handshake failed"
    causes = _causes(exc)
    text = " ".join(f"{type(e).__name__}: {e}" for e in causes).lower()
    if any(isinstance(e, socket.gaierror) for e in causes) or any(word in text for word in _DNS_WORDS):
        return "host name not resolved"
    refused = any(getattr(e, "errno", None) == errno.ECONNREFUSED for e in causes)
    if refused or "refused" in text:
        return "connection refused"
    return type(exc).__name__


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from (the transport maps aiohttp's errors to httpx's)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 5:
        chain.append(current)
        os_error = getattr(current, "os_error", None)  # aiohttp's ClientConnectorError
        if isinstance(os_error, OSError):
            chain.append(os_error)
        current = current.__cause__ or current.__context__
    return chain


def what_failed(exc: BaseException) -> str:
    return "deadline passed" if isinstance(exc, TimeoutError) else type(exc).__name__


def not_answered(call: GitLabCall, exc: BaseException) -> Transient:
    """A read whose answer did not come in time or whose connection dropped: retried."""
    return Transient(
        GitLabUpstreamError(
            f"GitLab did not answer {call.operation} in time or dropped the connection "
            f"({what_failed(exc)}); try again later.",
            request_id=call.request_id,
        )
    )
