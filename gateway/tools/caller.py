"""Who is calling: one identity, built once where a request comes in and handed down unchanged.

The transport authenticates a request (``gateway.mcp.http.auth``) and builds a :class:`Caller`;
the protocol core hands that same object to the tool call (``CallInfo.caller``): the registry
narrows the tools by its :attr:`~Caller.access`, the rate limiter counts on its
:attr:`~Caller.rate_limit_key`, the broker tools read its agent id, and ``ToolContext.gitlab``
speaks to GitLab with its credential.

Tokens never reach logs: :attr:`Caller.owner` and :attr:`Caller.rate_limit_key` hold a SHA-256 of
the GitLab credential, never the credential; both stay in memory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from gateway.gitlab.credentials import Credential
from gateway.tools.access import NO_LIMITS, ToolAccess


def credential_digest(credential: Credential) -> str:
    """A SHA-256 (hex) of ``credential``'s token: the same on every replica and after a restart,
    unlike ``Credential.cache_key``, which is keyed per process."""
    return hashlib.sha256(credential.token.encode()).hexdigest()


@dataclass(frozen=True)
class Caller:
    """The caller of one request.

    Attributes:
        agent_id: the broker agent id (``pm``, ``dev``, ``reviewer``) or None when unknown.
        credential: the GitLab credential for this caller (service or passthrough), or None in
            passthrough mode when the caller sent no GitLab token.
        remote: the peer address, for logs.
        claimed_agent_id: the ``X-Agent-Id`` value received when that header names the caller
            (loopback, no client tokens), as a short printable-ASCII prefix fit to quote in an
            error; set also when it was not a configured agent id (then ``agent_id`` is None).
            None when no header was sent or the header does not count (client tokens, not loopback).
        access: the tools this caller may list and call, below what the deployment serves.
        owner: what binds a session, a request state and a task to this caller: how callers are
            authenticated here (``client-token:<agent>:<token id>``, the token id a SHA-256 prefix
            of the token, or ``open`` where anyone may hold a session id), and for a passthrough
            credential ``|gitlab:`` and its :func:`credential_digest`. Never logged.
        rate_limit_key: the caller's bucket of the per-agent rate limits: its agent id (or
            ``anonymous``), and for a passthrough credential its digest too; empty: derived when
            needed (:func:`rate_limit_key`), as for callers a test builds.
        confirm_destructive: its client token asks for a person's confirmation before
            destructive actions (``gateway.tools.confirmations``).
        summary_text: a result with ``structuredContent`` carries a short text block instead of
            the JSON copy (``structured_text = "summary"``, the deployment's or its client token's).
        gitlab_user: the GitLab username of a person signed in through GitLab (``gateway.signin``),
            for access lines; None otherwise.
        gitlab_refusals: a signed-in caller's: where the tool runner notes GitLab's refusals of
            their token (``401``, ``insufficient_scope``), so that the transport answers with HTTP
            401 (sign in again) or 403 (step up) instead of a tool error; None otherwise.
    """

    agent_id: str | None
    credential: Credential | None
    remote: str = ""
    claimed_agent_id: str | None = None
    access: ToolAccess = NO_LIMITS
    owner: str = field(default="open", repr=False)
    confirm_destructive: bool = False
    rate_limit_key: str = field(default="", repr=False)
    summary_text: bool = False
    gitlab_user: str | None = None
    gitlab_refusals: list[str] | None = field(default=None, repr=False, compare=False)


def rate_limit_key(caller: Caller) -> str:
    """``caller``'s rate-limit bucket: the one the edge gave it, else derived the same way."""
    if caller.rate_limit_key:
        return caller.rate_limit_key
    key = f"agent:{caller.agent_id}" if caller.agent_id is not None else "anonymous"
    if caller.credential is not None and caller.credential.source == "passthrough":
        key += "|gitlab:" + credential_digest(caller.credential)
    return key
