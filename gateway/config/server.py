"""``[server]``: the HTTP listener, the metrics listener, and MCP session limits."""

from __future__ import annotations

import base64

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.base import _Section, is_loopback
from gateway.event_loop import EventLoopChoice, uvloop_import_error


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
    #: Sessions ended by DELETE recorded at most (all callers), and per caller (this replica's
    #: count): past either, a DELETE is refused (429) and the session stays open until it
    #: expires; never a record forgotten early, which would let its id work again.
    max_ended_sessions: int = Field(100_000, ge=1)
    max_ended_sessions_per_caller: int = Field(1_000, ge=1)
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
    #: Most messages in one JSON-RPC batch (2025-03-26 sessions): a larger batch is refused
    #: whole (-32600), before any of it runs.
    max_batch_messages: int = Field(64, ge=1)
    #: Messages of one batch answered at a time; the others wait their turn.
    batch_concurrency: int = Field(4, ge=1)
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
