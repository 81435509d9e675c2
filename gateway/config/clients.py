"""Callers: client tokens and the agents they act as, the toolsets and tools served, per-agent
rate limits (``client_tokens``, ``toolsets``, ``tools``, ``[limits]``)."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from gateway.config.base import _Section
from gateway.config.broker import AgentId

#: The toolsets tools belong to (``Tool.toolset``); ``toolsets`` may name only these.
TOOLSETS: tuple[str, ...] = ("ci", "repository", "duo_agent_platform", "broker", "superseded")
#: Served when neither ``toolsets`` nor ``tools`` is set: all but ``superseded`` (the pipeline tools
#: ``get_pipeline`` replaces), which ``toolsets = ["default", "superseded"]`` or ``["all"]`` adds.
DEFAULT_TOOLSETS: tuple[str, ...] = ("ci", "repository", "duo_agent_platform", "broker")
TOOLSET_KEYWORDS: tuple[str, ...] = ("default", "all")


def expand_toolsets(names: tuple[str, ...] | frozenset[str]) -> frozenset[str]:
    """The toolsets ``names`` means, its keywords (``default``, ``all``) replaced by what they name."""
    out = {name for name in names if name not in TOOLSET_KEYWORDS}
    if "default" in names:
        out.update(DEFAULT_TOOLSETS)
    if "all" in names:
        out.update(TOOLSETS)
    return frozenset(out)


#: Shortest client token accepted: 16 random characters are beyond guessing over the network.
MIN_CLIENT_TOKEN_LENGTH = 16
_MAKE_SECRET = "use a random secret, e.g. the output of `openssl rand -hex 32`"  # noqa: S105 (advice, no secret)


def _name_list(value: Any) -> Any:
    """A JSON list or a comma-separated string (environment, flags) as a list of names."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def _known_toolsets(value: Any) -> Any:
    if isinstance(value, list | tuple):
        unknown = [name for name in value if name not in TOOLSETS and name not in TOOLSET_KEYWORDS]
        if unknown:
            raise ValueError(
                f"unknown toolset {', '.join(map(repr, unknown))}: choose from "
                f"{', '.join(TOOLSETS + TOOLSET_KEYWORDS)}"
            )
    return value


_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _tool_names(value: Any) -> Any:
    if isinstance(value, list | tuple):
        bad = [name for name in value if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} cannot be a tool name (docs/tools/ lists them)")
    return value


class AgentAccess(_Section):
    """The tools an agent may use (within the deployment's; never more) and its own limits: a
    client token's, or a signed-in person's role's (``sign_in.role_access``)."""

    #: Only these toolsets (and ``tools``) for this token; None: every toolset served.
    toolsets: tuple[str, ...] | None = None
    #: Only these tools (besides ``toolsets``) for this token; None: no list of tools.
    tools: tuple[str, ...] | None = None
    #: Only read-only tools for this token.
    read_only: bool = False
    #: Ask a person before this token's destructive actions, even where the deployment does not.
    confirm_destructive: bool = False
    #: This token's own ``structured_text`` (``json`` or ``summary``); None: the deployment's.
    structured_text: Literal["json", "summary"] | None = None
    #: This token's own ``limits.calls_per_second`` (None: the global one).
    calls_per_second: float | None = Field(None, gt=0)
    #: This token's own ``limits.burst`` (None: the global one, else the rate rounded up).
    burst: int | None = Field(None, ge=1)

    @field_validator("toolsets", mode="before")
    @classmethod
    def _toolsets(cls, value: Any) -> Any:
        return _known_toolsets(_name_list(value))

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        return _tool_names(_name_list(value))


class ClientToken(AgentAccess):
    """A bearer secret a caller presents to the gateway, mapped to a broker agent id, and the
    tools its agent may use (:class:`AgentAccess`)."""

    token: SecretStr
    agent_id: AgentId

    @field_validator("token")
    @classmethod
    def _usable_token(cls, value: SecretStr) -> SecretStr:
        secret = value.get_secret_value()
        if not secret or secret != secret.strip() or any(c.isspace() for c in secret):
            raise ValueError(
                "must be a non-empty secret without spaces (it is sent as `Authorization: Bearer <token>`)"
            )
        # Whoever presents the token acts as its agent: a placeholder or a short word is guessable.
        if secret.upper().startswith("REPLACE"):
            raise ValueError(f"is still the example's placeholder; {_MAKE_SECRET}")
        if len(secret) < MIN_CLIENT_TOKEN_LENGTH:
            raise ValueError(f"is shorter than {MIN_CLIENT_TOKEN_LENGTH} characters; {_MAKE_SECRET}")
        return value


class LimitsSettings(_Section):
    """Per-agent rate limits on GitLab tool calls, calls in flight per caller, GitLab's 401s per
    source in passthrough mode (broker tools are never limited)."""

    #: Sustained GitLab tool calls per second each agent (and, in passthrough mode, each GitLab
    #: credential) may make; None: no limit. A client token's own value replaces it.
    calls_per_second: float | None = Field(None, gt=0)
    #: Calls an idle agent may make at once before the rate applies; None: the rate rounded up.
    burst: int | None = Field(None, ge=1)
    #: GitLab tool calls one caller (agent, and passthrough credential) may have under way at
    #: once, however sent (concurrent requests, a batch, tasks); one more is refused at once.
    max_calls_in_flight: int = Field(64, ge=1)
    #: Passthrough mode: GitLab 401s to callers' own tokens one source (the agent of a client
    #: token, else the client address) may collect before its tokens GitLab has not accepted
    #: lately are refused without reaching GitLab, for the window below after its last 401.
    passthrough_auth_failures: int = Field(10, ge=1)
    passthrough_auth_failure_window_seconds: float = Field(300.0, gt=0)
