"""Who is calling: the broker agent id and the GitLab credential of one ``/mcp`` request.

Rules (README, "Connecting a client"):

- With ``client_tokens`` configured, ``Authorization: Bearer <secret>`` must be one of them
  (compared in constant time, on SHA-256 digests so the length does not leak either); its
  ``agent_id`` is the caller and ``X-Agent-Id`` is ignored. No or a wrong token → HTTP 401 with
  ``WWW-Authenticate: Bearer`` (RFC 6750 §3).
- Without client tokens and bound to loopback, ``X-Agent-Id: pm|dev|reviewer`` names the caller;
  a value that is not one of ``broker.agents`` (ids are case-sensitive) gives no agent id, and
  a short printable prefix of it goes to ``Caller.claimed_agent_id`` so the broker tools can
  refuse naming what was received. Bound elsewhere without client tokens, nobody is an agent.
- GitLab credential: ``service`` mode → the gateway's ``GITLAB_TOKEN`` (anonymous when unset);
  ``passthrough`` → the caller's ``PRIVATE-TOKEN`` or ``Authorization: Bearer`` (only
  ``PRIVATE-TOKEN`` when ``Authorization`` carries the gateway secret), and a POST without one is
  refused with 401 saying which header to send.

Tools: :attr:`Caller.access` narrows what the deployment serves by the client token's
``toolsets``, ``tools`` and ``read_only`` and then by the request's ``X-MCP-Toolsets``,
``X-MCP-Tools`` and ``X-MCP-Readonly`` headers (``gateway.tools.access``); never wider.

The :class:`~gateway.tools.caller.Caller` is built here once per request and handed down
unchanged (its access, its rate-limit key and the session owner included). Tokens never reach
logs: :attr:`Caller.owner` is built from how callers are authenticated, the agent id and a
SHA-256 of the GitLab credential; it stays in memory, and a sealed session id holds only an HMAC
of it (``sessions``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from gateway.config import TOOLSETS, AgentAccess, Settings, is_loopback
from gateway.gitlab.credentials import Credential, passthrough_credential, service_credential
from gateway.mcp.http.statuses import HttpRefusal
from gateway.mcp.protocol.wire import UNAUTHORIZED
from gateway.observability.logging import register_secret
from gateway.tools.access import NO_LIMITS, Restriction, ToolAccess, header_restriction
from gateway.tools.caller import Caller, credential_digest

AGENT_HEADER = "X-Agent-Id"
#: At most this many characters of an ``X-Agent-Id`` value are quoted back: the longest agent id
#: the configuration accepts, so any value that could be an id is shown whole.
CLAIMED_AGENT_ID_CHARS = 64
_REALM = 'Bearer realm="gitlab-mcp-gateway"'


def quotable(value: str) -> str:
    """Caller input made fit to quote in an error: its first :data:`CLAIMED_AGENT_ID_CHARS`
    characters, each one that is not printable ASCII replaced by ``?``, and ``...`` when cut."""
    head = "".join(c if " " <= c <= "~" else "?" for c in value[:CLAIMED_AGENT_ID_CHARS])
    return head + ("..." if len(value) > CLAIMED_AGENT_ID_CHARS else "")


def unauthorized(message: str, challenge: str = _REALM) -> HttpRefusal:
    """A 401 refusal with its ``WWW-Authenticate`` challenge."""
    return HttpRefusal(UNAUTHORIZED, message, status=401, headers={"WWW-Authenticate": challenge})


def client_token_owner(agent_id: str, token: str) -> str:
    """``Caller.owner`` of a client token's callers: ``client-token:<agent>:<token id>``, the
    token id a SHA-256 of the token (so two tokens of one agent own different sessions and tasks)."""
    return f"client-token:{agent_id}:{hashlib.sha256(token.encode()).hexdigest()[:32]}"


def _token_access(client: AgentAccess, source: str) -> ToolAccess:
    """The layer an entry's own ``toolsets``, ``tools`` and ``read_only`` make (a client token's,
    a sign-in role's); ``source`` names the entry in refusals."""
    if client.toolsets is None and client.tools is None and not client.read_only:
        return NO_LIMITS
    return NO_LIMITS.narrowed(
        Restriction(
            source=source,
            toolsets=None if client.toolsets is None else frozenset(client.toolsets),
            tools=None if client.tools is None else frozenset(client.tools),
            read_only=client.read_only,
        )
    )


class SignedInCaller(Protocol):
    """A person signed in through GitLab (``gateway.signin``): what ``/mcp`` needs of them."""

    @property
    def grant_id(self) -> str: ...
    @property
    def gitlab_user_id(self) -> int: ...
    @property
    def gitlab_username(self) -> str: ...
    @property
    def role(self) -> str | None: ...
    @property
    def can_write(self) -> bool: ...
    @property
    def gitlab_token(self) -> str: ...


class SignInGate(Protocol):
    """The narrow part of sign-in ``/mcp`` uses (``gateway.signin.gate``), when sign-in is on."""

    #: ``WWW-Authenticate`` of a request without a usable token (RFC 9728 §5.1).
    challenge: str

    async def check(self, headers: Mapping[str, str]) -> SignedInCaller | None:
        """The signed-in caller a request's gateway access token stands for; None when it carries
        no gateway access token (a static client token may still let it in).

        Raises:
            HttpRefusal: 401 (a ``PRIVATE-TOKEN``, an access token expired or revoked), 503.
        """
        ...

    def check_call(self, who: SignedInCaller | None, params: Mapping[str, object] | None) -> None:
        """Before a ``tools/call``: a caller signed in with ``mcp:read`` only who calls a tool that
        changes things is asked to step up.

        Raises:
            HttpRefusal: 403 ``insufficient_scope`` (RFC 6750 §3.1).
        """
        ...

    async def renew(self, who: SignedInCaller) -> str:
        """``who``'s GitLab token after GitLab answered 401 to it: refreshed (once across
        replicas). Raises when it cannot be (revoked at GitLab, GitLab unreachable)."""
        ...

    async def refused_by_gitlab(self, who: SignedInCaller, refusals: list[str]) -> None:
        """After a call GitLab refused the signed-in caller's token: refresh it (401) and say so.

        Raises:
            HttpRefusal: 401 (the client refreshes, or signs in again when GitLab revoked the
                grant) or 403 ``insufficient_scope``.
        """
        ...


#: What a signed-in caller may use with only the ``mcp:read`` scope.
READ_SCOPE_ONLY = Restriction(
    source="your sign-in's scope mcp:read (sign in again with mcp:write to make changes)", read_only=True
)


class Authenticator:
    """Turns request headers into a :class:`Caller`. Built once per app from settings.

    ``sign_in_challenge``: sign-in is on (``[sign_in]``), and this is the ``WWW-Authenticate`` of
    a request whose bearer is neither a client token nor a gateway access token. ``X-Agent-Id``
    then names nobody, and no request reaches GitLab with the service token unless its bearer is
    a client token.
    """

    def __init__(self, settings: Settings, sign_in_challenge: str | None = None) -> None:
        self._sign_in_challenge = sign_in_challenge
        self._tokens = tuple(
            (
                hashlib.sha256(c.token.get_secret_value().encode()).digest(),
                c.agent_id,
                client_token_owner(c.agent_id, c.token.get_secret_value()),
                _token_access(c, f"the client token of agent {c.agent_id!r} (its client_tokens entry)"),
                c.confirm_destructive,
                (c.structured_text or settings.structured_text) == "summary",
            )
            for c in settings.client_tokens
        )
        self._summary_text = settings.structured_text == "summary"
        #: Sign-in role → its access, confirm_destructive, summary text (``sign_in.role_access``).
        self._roles = {
            role: (
                _token_access(entry, f"your sign-in's role {role!r} (sign_in.role_access.{role})"),
                entry.confirm_destructive,
                (entry.structured_text or settings.structured_text) == "summary",
            )
            for role, entry in settings.sign_in.role_access.items()
        }
        self._agents = frozenset(settings.broker.agents)
        self._agent_header = (
            not self._tokens and is_loopback(settings.server.host) and sign_in_challenge is None
        )
        self._passthrough = settings.gitlab.credential_mode == "passthrough"
        token = settings.gitlab.token
        self._service: Credential = service_credential(token.get_secret_value() if token else None)

    def authenticate(self, headers: Mapping[str, str], remote: str | None, *, require_gitlab: bool) -> Caller:
        """The caller of a request.

        Args:
            headers: the request's headers (case-insensitive mapping).
            remote: the peer address, for logs.
            require_gitlab: refuse a passthrough request that carries no GitLab token (POSTs).

        Raises:
            RpcError: HTTP 401 (code -32001): a client token is required and missing or wrong,
                or passthrough mode and no GitLab token was sent.
        """
        agent_id: str | None = None
        claimed: str | None = None
        owner = "open"
        access = NO_LIMITS
        confirm = False
        summary = self._summary_text
        if self._tokens or self._sign_in_challenge is not None:
            agent_id, owner, access, confirm, summary = self._client_token_agent(headers.get("Authorization"))
        elif self._agent_header:
            value = headers.get(AGENT_HEADER)
            if value is not None:
                value = value.strip()
                agent_id = value if value in self._agents else None
                claimed = quotable(value) if value else None

        credential: Credential | None
        rate_limit_key = f"agent:{agent_id}" if agent_id is not None else "anonymous"
        if self._passthrough:
            credential = passthrough_credential(headers, authorization_is_gateway_secret=bool(self._tokens))
            if credential is None and require_gitlab:
                raise unauthorized(self._missing_gitlab_token_message(), 'Bearer realm="gitlab"')
            if credential is not None:
                # Not ``credential.cache_key``: that is keyed per process, and a session must
                # be its caller's on every replica and after a restart.
                digest = credential_digest(credential)
                owner = f"{owner}|gitlab:{digest}"
                rate_limit_key += f"|gitlab:{digest}"
                register_secret(credential.token)  # redacted from every later log line
        else:
            credential = self._service
        return Caller(
            agent_id=agent_id,
            credential=credential,
            remote=remote or "",
            claimed_agent_id=claimed,
            access=access.narrowed(header_restriction(headers, TOOLSETS)),
            owner=owner,
            rate_limit_key=rate_limit_key,
            confirm_destructive=confirm,
            summary_text=summary,
        )

    def signed_in(
        self,
        who: SignedInCaller,
        headers: Mapping[str, str],
        remote: str | None,
        renew: Callable[[], Awaitable[str]] | None = None,
    ) -> Caller:
        """The caller of a request a signed-in person's gateway access token authenticated: their
        GitLab token (``renew`` refreshes it after GitLab's 401), their role as the agent id
        (never ``X-Agent-Id``) with its ``sign_in.role_access`` entry's tools and limits, rate
        limits per GitLab user."""
        access, confirm, summary = (
            self._roles.get(who.role, self._unlisted_role) if who.role is not None else self._unlisted_role
        )
        if not who.can_write:
            access = access.narrowed(READ_SCOPE_ONLY)

        async def renewed() -> Credential:
            assert renew is not None
            return Credential(header="Authorization", token=await renew(), source="service")

        return Caller(
            agent_id=who.role,
            credential=Credential(
                header="Authorization",
                token=who.gitlab_token,
                source="service",
                renew=None if renew is None else renewed,
            ),
            remote=remote or "",
            access=access.narrowed(header_restriction(headers, TOOLSETS)),
            owner=f"sign-in:{who.grant_id}:{who.role or ''}",
            rate_limit_key=f"gitlab-user:{who.gitlab_user_id}",
            confirm_destructive=confirm,
            summary_text=summary,
            gitlab_user=who.gitlab_username,
            gitlab_refusals=[],
        )

    @property
    def _unlisted_role(self) -> tuple[ToolAccess, bool, bool]:
        return NO_LIMITS, False, self._summary_text

    def _client_token_agent(self, authorization: str | None) -> tuple[str, str, ToolAccess, bool, bool]:
        scheme, _, secret = (authorization or "").strip().partition(" ")
        secret = secret.strip()
        if self._sign_in_challenge is not None and not self._tokens:
            raise unauthorized(
                "This gateway signs people in with GitLab: sign in through your MCP client (OAuth).",
                self._sign_in_challenge,
            )
        if scheme.lower() != "bearer" or not secret:
            if self._sign_in_challenge is not None:
                raise unauthorized(
                    "This gateway signs people in with GitLab: sign in through your MCP client (OAuth), "
                    "or send `Authorization: Bearer <your gateway client token>`.",
                    self._sign_in_challenge,
                )
            raise unauthorized(
                "This gateway requires a client token: send `Authorization: Bearer <your gateway client "
                "token>` with every request (ask the gateway's operator for one)."
            )
        digest = hashlib.sha256(secret.encode()).digest()
        found: tuple[str, str, ToolAccess, bool, bool] | None = None
        # No early exit: the same time for every position.
        for expected, agent_id, owner, access, confirm, summary in self._tokens:
            if hmac.compare_digest(digest, expected) and found is None:
                found = (agent_id, owner, access, confirm, summary)
        if found is None:
            if self._sign_in_challenge is not None:
                raise unauthorized(
                    "The bearer token is not one this gateway issued (GitLab tokens are not accepted here): "
                    "sign in through your MCP client (OAuth).",
                    self._sign_in_challenge.replace("Bearer ", 'Bearer error="invalid_token", ', 1),
                )
            raise unauthorized(
                "The bearer token is not one of this gateway's client tokens: send `Authorization: "
                "Bearer <your gateway client token>`.",
                _REALM + ', error="invalid_token"',
            )
        return found

    def _missing_gitlab_token_message(self) -> str:
        if self._tokens:
            return (
                "This gateway forwards each caller's own GitLab token (passthrough mode) and this request "
                "carried none: send `PRIVATE-TOKEN: <your GitLab token>` (Authorization carries your "
                "gateway client token)."
            )
        return (
            "This gateway forwards each caller's own GitLab token (passthrough mode) and this request "
            "carried none: send `PRIVATE-TOKEN: <your GitLab token>` or `Authorization: Bearer <your "
            "GitLab token>`."
        )
