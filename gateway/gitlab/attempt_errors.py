"""What one GitLab attempt that failed before its answer came is called, for the buffered path
(``gateway.gitlab.client``) and the streaming one (``gateway.gitlab.streaming``) alike."""

from __future__ import annotations

import httpx

from gateway.gitlab.call import GitLabCall, Transient
from gateway.gitlab.connect_hints import tls_hint
from gateway.gitlab.errors import GitLabUpstreamError

#: Failures before the request left: safe to send again, a mutation included.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def not_connected(call: GitLabCall, base_url: str, exc: BaseException) -> Transient:
    """An attempt that never reached GitLab (no connection): retried; what to check if it stays."""
    hint = tls_hint(exc) or "check GITLAB_URL, proxy settings (HTTPS_PROXY, NO_PROXY) and that GitLab is up"
    return Transient(
        GitLabUpstreamError(
            f"Could not connect to GitLab at {base_url} ({type(exc).__name__}): {hint}.",
            request_id=call.request_id,
        )
    )


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
