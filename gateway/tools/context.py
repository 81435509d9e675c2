"""What a tool handler receives: the app's services and the facts of this one call.

The protocol core builds a :class:`CallInfo` per ``tools/call`` (the :class:`Caller`, the request
id, a progress reporter); :class:`ToolContext` joins it with the app-wide services, which the tools
know only as :class:`ToolServices` describes them. The application builds them
(``gateway.server.services``) — nothing is global, so tests build their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gateway.errors import gateway_refusal
from gateway.tools.caller import Caller
from gateway.tools.input_requests import CAPABILITY_OF, Answers, AskFn, InputRequest, cannot_ask
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


#: ``await log(level, data)``: a ``notifications/message`` on the call's stream; a no-op when the
#: client did not ask for log messages.
LogFn = Callable[[str, str], Awaitable[None]]


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


async def _no_log(level: str, data: str) -> None:
    return None


@dataclass
class CallInfo:
    """Facts of one ``tools/call``.

    Attributes:
        request_id: the gateway's request id (logs, ``X-Request-Id`` to GitLab, errors).
        caller: the caller, as the transport authenticated it.
        session_id: the MCP session id, when the transport has one.
        progress: reporter bound to the request's ``_meta.progressToken``.
        has_progress_token: True when the caller asked for progress notifications.
        log: sends log messages to the client, when it asked for them.
        ask: asks the client for input (``gateway.tools.input_requests``).
        client_capabilities: the capabilities the client declared (names).
    """

    request_id: str
    caller: Caller
    session_id: str | None = None
    progress: ProgressFn = _no_progress
    has_progress_token: bool = False
    log: LogFn = _no_log
    ask: AskFn = cannot_ask
    client_capabilities: frozenset[str] = frozenset()


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
        credential = self.call.caller.credential
        if credential is None:
            raise gateway_refusal(
                "unauthorized",
                "This gateway forwards each caller's own GitLab token (passthrough mode) and this "
                "request carried none: send `PRIVATE-TOKEN: <token>` (or `Authorization: Bearer <token>`).",
            )
        broker, agent = self.services.broker, self.call.caller.agent_id
        if broker is not None and agent is not None:
            # The broker's "connected" and lastSeen count GitLab calls too.
            broker.roster.seen_calling(agent)
        return self.services.gitlab.session(credential, request_id=self.call.request_id)

    @property
    def agent_id(self) -> str | None:
        return self.call.caller.agent_id

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send ``notifications/progress`` on this call's stream (no-op without a token)."""
        await self.call.progress(progress, total, message)

    async def log(self, level: str, data: str) -> None:
        """Send ``notifications/message`` on this call's stream (no-op unless the client asked)."""
        await self.call.log(level, data)

    def can_ask(self, method: str) -> bool:
        """Whether the client declared the capability an input request ``method`` needs."""
        return CAPABILITY_OF[method] in self.call.client_capabilities

    async def ask(self, requests: Mapping[str, InputRequest]) -> Answers:
        """Ask the client (see ``gateway.tools.input_requests``): every answer by key.

        Raises:
            CannotAsk: the client cannot answer one of them.
        """
        return await self.call.ask(requests)
