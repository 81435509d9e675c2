"""``[broker]``: the phase broker, its agents, and where it keeps its state."""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, field_validator

from gateway.config.base import _Section

AgentId = str
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


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
    #: How often each replica writes its heartbeat in the database, seconds. A replica silent for
    #: three of them is gone (killed, frozen, cut off): ``broker status`` and the console say so,
    #: and an agent last seen there is not connected.
    heartbeat_seconds: float = Field(5.0, gt=0)
    #: At start, how long to keep retrying a PostgreSQL that does not answer yet, seconds.
    connect_timeout_seconds: float = Field(60.0, ge=0)
    #: Connections per replica in the PostgreSQL pool (plus one for LISTEN).
    pool_size: int = Field(10, ge=1)
    #: Lines kept per activity log in the database (older ones are pruned).
    log_keep_lines: int = Field(10_000, ge=100)
    #: Live MCP tasks (working or waiting for input) one caller may have at once; a ``tools/call``
    #: that would make one more is refused with a tool error (``rate_limited``) until some end.
    tasks_per_caller: int = Field(100, ge=1)

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
