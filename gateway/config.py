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
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import ssl
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from gateway.event_loop import EventLoopChoice, uvloop_import_error

AgentId = str
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


#: The toolsets tools belong to (``Tool.toolset``); ``toolsets`` may name only these and the
#: keywords ``default`` (:data:`DEFAULT_TOOLSETS`) and ``all``.
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


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Section):
    """HTTP listener and MCP session limits."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    #: A second listener serving only ``/metrics``, ``/healthz`` and ``/readyz`` (never ``/mcp``),
    #: so Prometheus and Kubernetes probes can reach a gateway whose MCP port stays on loopback.
    #: None: no second listener (the three endpoints are on ``port`` as always).
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_host: str = "0.0.0.0"  # noqa: S104 - only /metrics and probes are served there
    #: Extra ``Host`` header values accepted besides loopback names and the bind address
    #: (DNS-rebinding protection, MCP 2025-11-25 basic/transports#security-warning).
    allowed_hosts: tuple[str, ...] = ()
    #: ``Origin`` values accepted besides loopback origins. A request without ``Origin`` is fine.
    allowed_origins: tuple[str, ...] = ()
    #: Lifetime of a legacy-era MCP session (its sealed ``Mcp-Session-Id`` expires then).
    session_ttl_seconds: float = Field(86400.0, gt=0)
    #: No longer used: sessions ended by DELETE are kept in the broker's database until they
    #: expire, with no cap that could forget one early. Accepted so existing configurations load.
    max_sessions: int = Field(1000, ge=1)
    #: AES-256 key sealing ``Mcp-Session-Id`` values: 32 random bytes in base64
    #: (``openssl rand -base64 32``), the same on every replica. Unset: generated at start, so
    #: sessions do not survive a restart nor span replicas (an INFO log line says so).
    session_key: SecretStr | None = None
    #: The key before the last rotation, still accepted until its sessions expire.
    session_previous_key: SecretStr | None = None
    #: Test mode for the MCP conformance suite: adds its fixture tools (``test_simple_text``...),
    #: ``logging/setLevel`` and ``completion/complete``. Refused unless bound to loopback.
    conformance_fixtures: bool = False
    #: Largest accepted JSON-RPC request body, bytes.
    max_request_bytes: int = Field(1_048_576, ge=1024)
    #: Seconds in-flight calls get to finish after SIGTERM.
    shutdown_timeout_seconds: float = Field(10.0, ge=0)
    #: Longest wait, seconds, for a client to take one write of an answer (a JSON body, an SSE
    #: event): a client that stops reading is disconnected then, and what the answer held freed.
    write_timeout_seconds: float = Field(30.0, gt=0)
    #: SSE keep-alive comment interval for long tool calls, seconds.
    keepalive_seconds: float = Field(15.0, gt=0)
    #: Page size of ``tools/list`` (MCP server/utilities/pagination).
    tools_page_size: int = Field(50, ge=1)
    #: ``auto``: uvloop's event loop where it is installed (Linux, macOS), else asyncio's;
    #: ``asyncio``: asyncio's own loop; ``uvloop``: uvloop or a configuration error
    #: (``gateway.event_loop``).
    event_loop: EventLoopChoice = "auto"

    @field_validator("session_key", "session_previous_key")
    @classmethod
    def _aes_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            text = value.get_secret_value().strip().replace("-", "+").replace("_", "/")
            try:
                size = len(base64.b64decode(text + "=" * (-len(text) % 4), validate=True))
            except ValueError:
                size = -1
            if size != 32:
                raise ValueError("must be 32 random bytes in base64 (e.g. `openssl rand -base64 32`)")
        return value

    @field_validator("event_loop")
    @classmethod
    def _uvloop_importable(cls, value: EventLoopChoice) -> EventLoopChoice:
        if value == "uvloop" and (why := uvloop_import_error()) is not None:
            raise ValueError(
                f"uvloop cannot be imported here ({why}): install it (`pip install uvloop`; it runs on "
                'Linux and macOS), or set "auto" (uvloop where installed, else asyncio\'s loop) or "asyncio"'
            )
        return value

    @model_validator(mode="after")
    def _fixtures_on_loopback(self) -> ServerSettings:
        if self.conformance_fixtures and not is_loopback(self.host):
            raise ValueError(
                f"server.conformance_fixtures is a test mode and is refused off loopback ({self.host}): "
                "bind to 127.0.0.1 (or ::1) to run the conformance suite, and never enable it in production"
            )
        return self

    @model_validator(mode="after")
    def _ports_differ(self) -> ServerSettings:
        if self.metrics_port is not None and self.metrics_port == self.port:
            raise ValueError(
                f"server.metrics_port {self.metrics_port} is also server.port: pick another port for "
                "the metrics listener, or leave server.metrics_port unset to serve /metrics on server.port."
            )
        return self


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


class ClientToken(_Section):
    """A bearer secret a caller presents to the gateway, mapped to a broker agent id, and the
    tools its agent may use (within the deployment's; never more)."""

    token: SecretStr
    agent_id: AgentId
    #: Only these toolsets (and ``tools``) for this token; None: every toolset served.
    toolsets: tuple[str, ...] | None = None
    #: Only these tools (besides ``toolsets``) for this token; None: no list of tools.
    tools: tuple[str, ...] | None = None
    #: Only read-only tools for this token.
    read_only: bool = False
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


#: The placeholder of ``deploy/compose/gateway.env.example``.
_GITLAB_TOKEN_EXAMPLE = "glpat-REPLACE-ME"  # noqa: S105 (a placeholder, no secret)


class GitLabSettings(_Section):
    """Where GitLab is and how the gateway talks to it."""

    url: str = "https://gitlab.com"
    token: SecretStr | None = None
    #: ``service``: send ``token``. ``passthrough``: forward the caller's own GitLab token.
    credential_mode: Literal["service", "passthrough"] = "service"
    #: PEM bundle of extra CA certificates (a private CA); TLS verification is never off.
    ca_bundle: Path | None = None
    #: One whole GitLab request, the answer's body included; also each socket read.
    timeout_seconds: float = Field(30.0, gt=0)
    #: Connecting, or waiting for a free pooled connection (nothing sent yet).
    connect_timeout_seconds: float = Field(5.0, gt=0)
    #: Reads only: attempts in all (1 = no retry), and the deadline across all of them.
    retry_attempts: int = Field(4, ge=1, le=10)
    retry_deadline_seconds: float = Field(30.0, gt=0)
    #: Longest ``Retry-After`` the gateway waits for on the caller's behalf; longer → rate_limited.
    max_retry_after_seconds: float = Field(10.0, ge=0)
    #: At start, one request to GitLab and one log line: reachable? token accepted? Never fatal.
    startup_check: bool = True

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str) -> str:
        value = value.strip()
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://, for example https://gitlab.example.com")
        return value

    @field_validator("token")
    @classmethod
    def _not_a_placeholder(cls, value: SecretStr | None) -> SecretStr | None:
        # Narrow on purpose: a real token never says REPLACE, and any other text is GitLab's to judge.
        secret = "" if value is None else value.get_secret_value()
        if "REPLACE" in secret.upper() or secret.strip() == _GITLAB_TOKEN_EXAMPLE:
            raise ValueError(
                "is still the example's placeholder: create a personal or project access token with scope "
                "api (read_api with --read-only; "
                "https://docs.gitlab.com/user/profile/personal_access_tokens/) and set GITLAB_TOKEN to "
                "it, or unset GITLAB_TOKEN to read public projects anonymously"
            )
        return value

    @field_validator("ca_bundle")
    @classmethod
    def _ca_bundle_loads(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        if not value.is_file():
            raise ValueError(f"{value} is not a file: give the path of a PEM file of CA certificates")
        try:
            ssl.create_default_context().load_verify_locations(cafile=str(value))
        except (ssl.SSLError, OSError, ValueError) as err:
            raise ValueError(f"{value} holds no usable PEM CA certificate ({err})") from None
        return value


class CacheSettings(_Section):
    """What GitLab data is kept, for how long. Keys always include a keyed hash of the credential."""

    enabled: bool = True
    #: Entries per cache at most (least recently used out first).
    max_entries: int = Field(2048, ge=1)
    #: Approximate bytes per cache at most (file contents can be up to 10 MiB each).
    max_bytes: int = Field(67_108_864, ge=1024)
    #: File content at an immutable commit SHA, seconds.
    blob_ttl_seconds: float = Field(600.0, ge=0)
    #: A project's branch and tag names (for blob URLs whose branch contains ``/``), seconds.
    refs_ttl_seconds: float = Field(30.0, ge=0)
    #: A project's Duo context exclusion rules, seconds.
    exclusions_ttl_seconds: float = Field(60.0, ge=0)
    #: Cached file content is served only while GitLab confirmed, this many seconds ago at most,
    #: that the caller's credential still reads the project's code (else one small request first).
    access_check_seconds: float = Field(30.0, gt=0)


class BrokerSettings(_Section):
    """The phase broker (``docs/broker.md``)."""

    agents: tuple[AgentId, ...] = ("pm", "dev", "reviewer")
    fail_limit: int = Field(3, ge=1)
    fix_limit: int = Field(2, ge=1)
    #: Longest single ``wait_for_message``, seconds (the broker's documented default is 3600).
    max_wait_seconds: float = Field(3600.0, gt=0)
    #: An agent is ``connected`` with a wait open or a call within this many seconds.
    connected_window_seconds: float = Field(60.0, gt=0)
    #: When set, replaces every plan's ``cooldownMinutes`` (seconds); for tests and demos.
    cooldown_seconds_override: float | None = Field(None, ge=0)
    #: Activity logs rotate at this size, keeping ``log_backups`` old files.
    log_max_bytes: int = Field(1_048_576, ge=1024)
    log_backups: int = Field(3, ge=0)
    #: Auto-advance's ``session_reset`` stage: seconds between the reset messages and the next phase.
    session_reset_seconds: float = Field(30.0, ge=0)
    #: ``notifications/progress`` interval of a waiting ``wait_for_message``, seconds.
    progress_interval_seconds: float = Field(15.0, gt=0)
    #: Where the broker keeps its state. Unset: the SQLite file ``<state_dir>/broker.db`` (one
    #: gateway process). ``postgresql://user:password@host:5432/dbname`` (libpq query parameters
    #: such as ``?sslmode=require`` pass through): a PostgreSQL database any number of gateway
    #: replicas share. The password never reaches a log line, ``--print-config`` or ``/metrics``.
    database_url: SecretStr | None = None
    #: A message handed to a wait is leased this long: when the transport never reports its answer
    #: as written (the replica died), it is delivered again afterwards (same messageId).
    lease_seconds: float = Field(30.0, gt=0)
    #: For agents that acknowledge (``wait_for_message``'s ``ack``): a message written to the
    #: agent but not acknowledged within this many seconds is delivered again (same messageId).
    ack_timeout_seconds: float = Field(300.0, gt=0)
    #: For agents that do not acknowledge: a message written to the agent counts as delivered
    #: this many seconds later unless the client reset the connection meanwhile (it closed
    #: without reading the answer), in which case it stays queued; 0 turns the check off.
    read_check_seconds: float = Field(0.2, ge=0)
    #: Largest message body accepted by send_message / reply_message (its JSON text, UTF-8 bytes).
    #: Bodies are for coordination; put large content in GitLab (a file, an issue) and send its link.
    max_message_bytes: int = Field(262_144, ge=1024)
    #: A get_message_history answer (structuredContent and its JSON text block) stays within about
    #: this many bytes per page; a body over ``history_item_bytes`` is shown truncated
    #: (``bodyTruncated: true``).
    history_page_bytes: int = Field(1_048_576, ge=4096)
    history_item_bytes: int = Field(65_536, ge=1024)
    #: Delivered messages are deleted this long after delivery (seconds; 0: at the next purge) ...
    retain_delivered_seconds: float = Field(604_800.0, ge=0)
    #: ... and beyond the newest this many delivered messages. Queued ones are never deleted.
    retain_delivered_count: int = Field(10_000, ge=0)
    #: How often the timer loop applies the retention rule (seconds; sooner while it is catching up).
    purge_interval_seconds: float = Field(60.0, gt=0)
    #: Open waits look at their queue at least this often even without a signal, seconds: a
    #: safety net for a missed one (a send, a lease given back, and a lease or acknowledgement
    #: hold running out wake waits at once).
    recheck_seconds: float = Field(5.0, gt=0)
    #: How often each replica looks for a due auto-advance step and saves ``lastSeen``, seconds.
    timer_poll_seconds: float = Field(1.0, gt=0)
    #: At start, how long to keep retrying a PostgreSQL that does not answer yet, seconds.
    connect_timeout_seconds: float = Field(60.0, ge=0)
    #: Connections per replica in the PostgreSQL pool (plus one for LISTEN).
    pool_size: int = Field(10, ge=1)
    #: Lines kept per activity log in the database (older ones are pruned).
    log_keep_lines: int = Field(10_000, ge=100)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        url = value.get_secret_value().strip()
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
            shown = scheme or url.split(":", 1)[0][:20]
            raise ValueError(
                f"scheme {shown!r} is not supported: use postgresql://user:password@host:5432/dbname for a "
                "PostgreSQL database shared by replicas, or leave it unset for the SQLite file in "
                "GATEWAY_STATE_DIR"
            )
        return SecretStr(url)

    @field_validator("agents")
    @classmethod
    def _agent_ids(cls, value: tuple[AgentId, ...]) -> tuple[AgentId, ...]:
        # Agent ids name activity-log files (``logs/<agent>.log``); "pipeline" is the broker's own.
        if not value:
            raise ValueError('needs at least one agent id, for example ["pm", "dev", "reviewer"]')
        for agent in value:
            if not _AGENT_ID.fullmatch(agent) or agent == "pipeline":
                raise ValueError(
                    f"{agent!r} is not a usable agent id: use 1-64 letters, digits, '-' or '_', starting "
                    "with a letter or digit, and not 'pipeline' (the broker's own log)"
                )
        if len(set(value)) != len(value):
            raise ValueError(f"lists an agent id twice: {list(value)}")
        for reserved, why in (
            ("broker", "it is the sender of the broker's own notices"),
            ("human", "it is the sender of the instructions people send from the broker console"),
        ):
            if reserved in value:
                raise ValueError(
                    f"{reserved!r} is not a usable agent id: {why}; rename that agent in broker.agents"
                )
        if "pm" not in value:
            raise ValueError(
                f"{list(value)} has no 'pm': only 'pm' may call resume (docs/broker.md), so without it "
                "HUMAN_NEEDED and PAUSED could never be left; add 'pm' to broker.agents"
            )
        return value


#: The shortest console token accepted: a guessable one would open the pipeline's controls.
MIN_CONSOLE_TOKEN_CHARS = 16


class ConsoleSettings(_Section):
    """``[console]``: the live broker console at ``/broker`` (off unless a token is set)."""

    #: Signs in with every right: watch, instruct the PM, switch auto-advance, stop, start over.
    operator_token: SecretStr | None = None
    #: Signs in to watch only (read-only viewers).
    viewer_token: SecretStr | None = None
    #: How long a console sign-in lasts.
    session_hours: float = Field(12.0, gt=0, le=24 * 30)
    #: Message bodies longer than this (as indented JSON) are shown collapsed.
    collapse_body_chars: int = Field(400, ge=40)
    #: Messages per page of the threads view.
    page_messages: int = Field(50, ge=5, le=500)
    #: Lines of each activity log shown.
    log_lines: int = Field(40, ge=5, le=1000)

    @field_validator("operator_token", "viewer_token")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        if len(value.get_secret_value().strip()) < MIN_CONSOLE_TOKEN_CHARS:
            raise ValueError(
                f"is shorter than {MIN_CONSOLE_TOKEN_CHARS} characters: use a random secret, for example "
                "the output of `openssl rand -base64 32`"
            )
        return SecretStr(value.get_secret_value().strip())

    @property
    def enabled(self) -> bool:
        """The console is served only when at least one token is configured."""
        return self.operator_token is not None or self.viewer_token is not None


class LimitsSettings(_Section):
    """Per-agent rate limits on GitLab tool calls (broker tools are never limited)."""

    #: Sustained GitLab tool calls per second each agent (and, in passthrough mode, each GitLab
    #: credential) may make; None: no limit. A client token's own value replaces it.
    calls_per_second: float | None = Field(None, gt=0)
    #: Calls an idle agent may make at once before the rate applies; None: the rate rounded up.
    burst: int | None = Field(None, ge=1)


class LoggingSettings(_Section):
    """Structured logs on stderr."""

    #: ``json``: one JSON object per line (containers, log shippers). ``plain``: for people.
    format: Literal["json", "plain"] = "plain"
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("format", mode="before")
    @classmethod
    def _format_any_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value


class Settings(BaseSettings):
    """The gateway's whole configuration. Build it with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="GATEWAY_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    server: ServerSettings = ServerSettings()
    gitlab: GitLabSettings = GitLabSettings()
    cache: CacheSettings = CacheSettings()
    broker: BrokerSettings = BrokerSettings()
    console: ConsoleSettings = ConsoleSettings()
    logging: LoggingSettings = LoggingSettings()
    limits: LimitsSettings = LimitsSettings()
    #: Broker database, activity logs and ``.stop-pipeline``.
    state_dir: Path = Path(".pipeline")
    #: Hide and refuse every tool that is not read-only.
    read_only: bool = False
    #: Only these toolsets are served (``ci``, ``repository``, ``duo_agent_platform``, ``broker``,
    #: ``superseded``, or the keywords ``default`` and ``all``); empty means the default toolsets
    #: (all but ``superseded``). The environment takes a JSON list or a comma-separated list.
    toolsets: Annotated[tuple[str, ...], NoDecode] = ()
    #: Tools served besides ``toolsets`` (names as in ``tools/list``); with ``toolsets`` empty,
    #: only these. The environment takes a JSON list or a comma-separated list.
    tools: Annotated[tuple[str, ...], NoDecode] = ()
    #: Bearer secrets of callers, each mapped to a broker agent id. Empty: ``X-Agent-Id`` on loopback.
    client_tokens: tuple[ClientToken, ...] = ()

    @field_validator("toolsets", mode="before")
    @classmethod
    def _toolsets(cls, value: Any) -> Any:
        try:
            return _known_toolsets(_name_list(value))
        except ValueError as err:
            raise ValueError(f"{err} (empty serves the default toolsets)") from None

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        return _tool_names(_name_list(value))

    @model_validator(mode="after")
    def _check(self) -> Settings:
        secrets = [client.token.get_secret_value() for client in self.client_tokens]
        if len(set(secrets)) != len(secrets):
            raise ValueError(
                "client_tokens: two entries have the same token; give each principal its own secret"
            )
        console = [
            (name, token.get_secret_value())
            for name, token in (
                ("console.operator_token", self.console.operator_token),
                ("console.viewer_token", self.console.viewer_token),
            )
            if token is not None
        ]
        if len(console) == 2 and console[0][1] == console[1][1]:
            raise ValueError(
                "console.operator_token and console.viewer_token are the same: a viewer could act; "
                "give each its own secret"
            )
        others = set(secrets)
        if self.gitlab.token is not None:
            others.add(self.gitlab.token.get_secret_value())
        for name, token in console:
            if token in others:
                raise ValueError(
                    f"{name} is also a client token or the GitLab token: the console needs a secret of its "
                    "own (an agent's token must not open the operator's controls)"
                )
        for client in self.client_tokens:
            if (
                client.burst is not None
                and client.calls_per_second is None
                and self.limits.calls_per_second is None
            ):
                raise ValueError(
                    f"client_tokens: the entry of agent {client.agent_id!r} sets burst but no "
                    "calls_per_second, and limits.calls_per_second is not set either: give the rate too"
                )
            if client.agent_id not in self.broker.agents:
                raise ValueError(
                    f"client_tokens: agent_id {client.agent_id!r} is not one of broker.agents "
                    f"{list(self.broker.agents)}"
                )
        if (
            not is_loopback(self.server.host)
            and self.gitlab.credential_mode == "service"
            and self.gitlab.token is not None
            and not self.client_tokens
        ):
            raise ValueError(
                f"server.host {self.server.host!r} is not a loopback address, a service GitLab token is set "
                "and no client_tokens are configured: anyone who reaches the port could act with that "
                "token. Configure client_tokens, use gitlab.credential_mode = 'passthrough', or bind "
                "to 127.0.0.1."
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            _ContractEnvSource(settings_cls),
            env_settings,
            TomlConfigSettingsSource(settings_cls),
        )


#: The outside contract's environment names and their options (an empty value counts as unset).
CONTRACT_ENVIRONMENT: dict[str, tuple[str, str | None]] = {
    "GITLAB_URL": ("gitlab", "url"),
    "GITLAB_TOKEN": ("gitlab", "token"),
    "GATEWAY_STATE_DIR": ("state_dir", None),
}


class _ContractEnvSource(PydanticBaseSettingsSource):
    """Maps the outside contract's environment names onto their options."""

    _NAMES = CONTRACT_ENVIRONMENT

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for env_name, (section, option) in self._NAMES.items():
            value = os.environ.get(env_name)
            if value is None or value == "":
                continue
            if option is None:
                out[section] = value
            else:
                out.setdefault(section, {})[option] = value
        return out


def is_loopback(host: str) -> bool:
    """True when ``host`` (a name or an address) only listens on the loopback interface."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build :class:`Settings` from ``config_file`` (TOML), the environment and ``overrides``.

    Args:
        config_file: a TOML file; its tables are the sections of :class:`Settings`.
        **overrides: highest-precedence values, as nested dicts (``server={"port": 9000}``);
            they are merged into the file's and the environment's values, not swapped for them.

    Raises:
        pydantic.ValidationError: an option is invalid; each error's ``loc`` names the option.
        FileNotFoundError: ``config_file`` does not exist.
    """
    if config_file is None:
        return Settings(**overrides)
    if not config_file.is_file():
        # Relative to the folder the gateway runs in, which may not be the one it was started from.
        shown = config_file if config_file.is_absolute() else f"{config_file} ({config_file.resolve()})"
        raise FileNotFoundError(f"configuration file {shown} does not exist")

    class _FromFile(Settings):
        model_config = SettingsConfigDict(toml_file=config_file)

    loaded = _FromFile(**overrides)
    return Settings.model_construct(**{name: getattr(loaded, name) for name in Settings.model_fields})
