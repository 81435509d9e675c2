"""Configuration: defaults, a TOML file, then the environment, then command-line flags.

Precedence (highest first): CLI flags (``--host``, ``--port``, ``--read-only``) > environment >
TOML file (``--config FILE``) > defaults. ``gateway/config_example.toml`` lists every option
(``gitlab-mcp-gateway --example-config`` prints it).

Environment names:

- The outside contract's names (README): ``GITLAB_URL``, ``GITLAB_TOKEN``,
  ``GATEWAY_STATE_DIR``.
- Every other option as ``GATEWAY_<SECTION>__<OPTION>``, for example
  ``GATEWAY_GITLAB__CREDENTIAL_MODE=passthrough`` or ``GATEWAY_BROKER__FAIL_LIMIT=5``; top-level
  options as ``GATEWAY_<OPTION>`` (``GATEWAY_READ_ONLY=true``). Lists and tables are JSON.

Validation errors name the option (``gitlab.url``) and are printed without a stack trace by
``gateway.__main__``.

The package is split by what each part configures: ``server``, ``gitlab`` (and the cache),
``broker``, ``console``, ``clients`` (client tokens, toolsets, per-agent limits),
``observability`` (logging), ``environment`` (the contract's names) and ``settings`` (the whole
:class:`Settings` and :func:`load_settings`). Import from ``gateway.config``.
"""

from __future__ import annotations

from gateway.config.base import is_loopback
from gateway.config.broker import AgentId, BrokerSettings
from gateway.config.clients import (
    DEFAULT_TOOLSETS,
    MIN_CLIENT_TOKEN_LENGTH,
    TOOLSET_KEYWORDS,
    TOOLSETS,
    AgentAccess,
    ClientToken,
    LimitsSettings,
    expand_toolsets,
)
from gateway.config.console import MIN_CONSOLE_TOKEN_CHARS, ConsoleSettings
from gateway.config.environment import CONTRACT_ENVIRONMENT
from gateway.config.gitlab import CacheSettings, GitLabSettings
from gateway.config.observability import LoggingSettings
from gateway.config.server import ServerSettings
from gateway.config.settings import Settings, load_settings
from gateway.config.sign_in import SignInClient, SignInSettings, decode_encryption_key

__all__ = [
    "CONTRACT_ENVIRONMENT",
    "DEFAULT_TOOLSETS",
    "MIN_CLIENT_TOKEN_LENGTH",
    "MIN_CONSOLE_TOKEN_CHARS",
    "TOOLSETS",
    "TOOLSET_KEYWORDS",
    "AgentAccess",
    "AgentId",
    "BrokerSettings",
    "CacheSettings",
    "ClientToken",
    "ConsoleSettings",
    "GitLabSettings",
    "LimitsSettings",
    "LoggingSettings",
    "ServerSettings",
    "Settings",
    "SignInClient",
    "SignInSettings",
    "decode_encryption_key",
    "expand_toolsets",
    "is_loopback",
    "load_settings",
]
