"""What a tool handler receives: the app's services and the facts of this one call.

The transport builds a :class:`CallInfo` per ``tools/call`` (who is calling, the request id,
a progress reporter); :class:`ToolContext` joins it with the app-wide services, which the tools
know only as :class:`ToolServices` describes them. The application builds them
(``gateway.server.services``) — nothing is global, so tests build their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gateway.errors import ToolError
from gateway.gitlab.credentials import Credential
from gateway.tools.waiting import SharedPolls

if TYPE_CHECKING:
    from gateway.broker.service import BrokerService
    from gateway.cache import CacheRegistry
    from gateway.config import Settings
    from gateway.gitlab.capabilities import Capabilities
    from gateway.gitlab.client import GitLabClient, GitLabSession
    from gateway.observability.metrics import Metrics

#: ``await progress(progress, total, message)``; a no-op when the caller sent no progressToken.
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


@dataclass(frozen=True)
class Principal:
    """Who is calling.

    Attributes:
        agent_id: the broker agent id (``pm``, ``dev``, ``reviewer``) or None when unknown.
        credential: the GitLab credential for this caller (service or passthrough), or None in
            passthrough mode when the caller sent no GitLab token.
        remote: the peer address, for logs.
        claimed_agent_id: the ``X-Agent-Id`` value received when that header names the caller
            (loopback, no client tokens), as a short printable-ASCII prefix fit to quote in an
            error; set also when it was not a configured agent id (then ``agent_id`` is None).
            None when no header was sent or the header does not count (client tokens, not loopback).
    """

    agent_id: str | None
    credential: Credential | None
    remote: str = ""
    claimed_agent_id: str | None = None


@dataclass
class CallInfo:
    """Facts of one ``tools/call``.

    Attributes:
        request_id: the gateway's request id (logs, ``X-Request-Id`` to GitLab, errors).
        principal: the caller.
        session_id: the MCP session id, when the transport has one.
        progress: reporter bound to the request's ``_meta.progressToken``.
        has_progress_token: True when the caller asked for progress notifications.
    """

    request_id: str
    principal: Principal
    session_id: str | None = None
    progress: ProgressFn = _no_progress
    has_progress_token: bool = False


class ToolServices(Protocol):
    """The app-wide services every call shares, as the tools use them (the application's
    ``gateway.server.services.Services`` is one; a test may hand a tool its own)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def gitlab(self) -> GitLabClient: ...

    @property
    def caches(self) -> CacheRegistry: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def broker(self) -> BrokerService | None:
        """None where the app runs without one (tests of the GitLab tools)."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the configured GitLab offers (CE or EE), learnt from its answers."""
        ...

    @property
    def polls(self) -> SharedPolls:
        """Server-side waits (``wait_seconds``), one shared poll per resource and credential."""
        ...


@dataclass
class ToolContext:
    """Handed to every tool handler."""

    services: ToolServices
    call: CallInfo

    @property
    def settings(self) -> Settings:
        return self.services.settings

    @property
    def gitlab(self) -> GitLabSession:
        """The GitLab client bound to this caller's credential and request id.

        Raises:
            ToolError: ``unauthorized`` in passthrough mode when the caller sent no GitLab token.
        """
        credential = self.call.principal.credential
        if credential is None:
            raise ToolError(
                "unauthorized",
                "This gateway forwards each caller's own GitLab token (passthrough mode) and this "
                "request carried none: send `PRIVATE-TOKEN: <token>` (or `Authorization: Bearer <token>`).",
            )
        return self.services.gitlab.session(credential, request_id=self.call.request_id)

    @property
    def agent_id(self) -> str | None:
        return self.call.principal.agent_id

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` on this call's stream (no-op without a token)."""
        await self.call.progress(progress, total, message)
