"""The broker's tables as SQLAlchemy Core objects: the schema at the newest migration.

The migrations (``gateway.broker.migrations``) create these; the queries
(``gateway.broker.queries``) use them, so one set of statements serves SQLite and PostgreSQL.
Times written for people are ISO 8601 text (``2026-04-11T01:10:00Z``); times compared by the
code (deadlines, leases) are Unix seconds.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

pipeline = sa.Table(
    "pipeline",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("phase", sa.Integer),
    sa.Column("fix_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("auto_advance", sa.Integer, nullable=False, server_default="0"),
    sa.Column("aa_stage", sa.Text),
    sa.Column("aa_deadline", sa.Float),
    sa.Column("aa_next_phase", sa.Integer),
    sa.Column("human_origin", sa.Text),
    sa.Column("human_reason", sa.Text),
    sa.Column("human_by", sa.Text),
    sa.Column("human_at", sa.Text),
    sa.Column("stopped_by", sa.Text),
    sa.Column("stopped_at", sa.Text),
    sa.Column("updated_at", sa.Text, nullable=False),
    # Added by migration 0004: which pipeline this is; starting over after a stop archives the
    # stopped one under its generation and raises it by one.
    sa.Column("generation", sa.Integer, nullable=False, server_default="1"),
)

issues = sa.Table(
    "issues",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("position", sa.Integer, nullable=False, unique=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("fail_count", sa.Integer, nullable=False, server_default="0"),
)

plan = sa.Table(
    "plan",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("plan_id", sa.Text, nullable=False),
    sa.Column("phases", sa.Text, nullable=False),
    sa.Column("cooldown_minutes", sa.Float, nullable=False),
    sa.Column("completed_phases", sa.Text, nullable=False, server_default="[]"),
    sa.Column("updated_at", sa.Text, nullable=False),
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("id", sa.Text, nullable=False, unique=True),
    sa.Column("sender", sa.Text, nullable=False),
    sa.Column("recipient", sa.Text, nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("reply_to", sa.Text),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("delivered_at", sa.Text),
    sa.Column("delivery_attempts", sa.Integer, nullable=False, server_default="0"),
    # Added by migration 0002: the lease of a wait that holds the message (Unix seconds; NULL or
    # past: free), the token that fences its acknowledgement, and body.issue for the history filter.
    sa.Column("lease_until", sa.Float),
    sa.Column("lease_token", sa.Text),
    sa.Column("issue", sa.Text),
    sqlite_autoincrement=True,
)

agents = sa.Table(
    "agents",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("last_seen", sa.Text),
    # Added by migration 0003: 1 once the agent sent ``ack`` (its messages then wait for one).
    sa.Column("acknowledges", sa.Integer, nullable=False, server_default="0"),
    # Added by migration 0010: the replica (``replicas.id``) that saved ``last_seen``: an agent
    # whose replica stopped beating is not connected, however recent its last call.
    sa.Column("replica", sa.Text),
)

transitions = sa.Table(
    "transitions",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("at", sa.Text, nullable=False),
    sa.Column("from_state", sa.Text, nullable=False),
    sa.Column("to_state", sa.Text, nullable=False),
    sa.Column("event", sa.Text, nullable=False),
    sa.Column("agent", sa.Text),
    sqlite_autoincrement=True,
)

activity_log = sa.Table(
    "activity_log",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("at", sa.Text, nullable=False),
    sa.Column("who", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Index("activity_log_by_name", "name", "seq"),
    sqlite_autoincrement=True,
)

# Added by migration 0004: stopped pipelines, archived when an operator starts over.
archived_pipelines = sa.Table(
    "archived_pipelines",
    metadata,
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("archived_at", sa.Text, nullable=False),
    sa.Column("archived_by", sa.Text, nullable=False),
    sa.Column("final_state", sa.Text, nullable=False),
    # JSON: the pipeline row, its issues and its plan as they were.
    sa.Column("snapshot", sa.Text, nullable=False),
)

archived_messages = sa.Table(
    "archived_messages",
    metadata,
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("id", sa.Text, nullable=False),
    sa.Column("sender", sa.Text, nullable=False),
    sa.Column("recipient", sa.Text, nullable=False),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("reply_to", sa.Text),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("created_at", sa.Text, nullable=False),
    sa.Column("delivered_at", sa.Text),
    sa.Column("delivery_attempts", sa.Integer, nullable=False),
    sa.Column("issue", sa.Text),
)

archived_transitions = sa.Table(
    "archived_transitions",
    metadata,
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("at", sa.Text, nullable=False),
    sa.Column("from_state", sa.Text, nullable=False),
    sa.Column("to_state", sa.Text, nullable=False),
    sa.Column("event", sa.Text, nullable=False),
    sa.Column("agent", sa.Text),
)

archived_activity_log = sa.Table(
    "archived_activity_log",
    metadata,
    sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("at", sa.Text, nullable=False),
    sa.Column("who", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
)

# Added by migration 0005.
#: MCP sessions ended by DELETE (``gateway.broker.ended_sessions``): a SHA-256 of the session's
#: number and the moment its sealed id expires, after which the row serves no purpose.
ended_sessions = sa.Table(
    "ended_sessions",
    metadata,
    sa.Column("id_hash", sa.Text, primary_key=True),
    sa.Column("expires", sa.Float, nullable=False),
    sa.Index("ended_sessions_by_expiry", "expires"),
)

# Added by migration 0006.
#: Console sessions signed out (``gateway.broker.console_sign_outs``): a SHA-256 of the session's
#: nonce and the moment its cookie expires, after which the row serves no purpose.
console_sign_outs = sa.Table(
    "console_sign_outs",
    metadata,
    sa.Column("nonce_hash", sa.Text, primary_key=True),
    sa.Column("expires", sa.Float, nullable=False),
    sa.Index("console_sign_outs_by_expiry", "expires"),
)

# Added by migration 0007.
#: Tasks of the MCP tasks extension (``gateway.broker.tasks``): one long ``tools/call`` each, kept
#: so that any replica answers ``tasks/get`` and resumes the work of a replica that went away.
#: Keyed by a SHA-256 of the task id (the id is a bearer handle); ``owner_hash`` binds it to its
#: caller; ``lease_owner``/``lease_until`` say which replica runs it and until when.
tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("id_hash", sa.Text, primary_key=True),
    sa.Column("owner_hash", sa.Text, nullable=False),
    sa.Column("tool", sa.Text, nullable=False),
    sa.Column("arguments", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("status_message", sa.Text),
    sa.Column("outcome", sa.Text),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
    sa.Column("deadline", sa.Float, nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
    sa.Column("poll_ms", sa.Integer, nullable=False),
    sa.Column("lease_owner", sa.Text),
    sa.Column("lease_until", sa.Float, nullable=False, server_default="0"),
    # Input during a task: the outstanding questions (a JSON object of InputRequest by key,
    # while input_required) and every answer delivered so far (JSON, by key).
    sa.Column("input_requests", sa.Text),
    sa.Column("answers", sa.Text),
    sa.Index("tasks_by_expiry", "expires"),
)

# Added by migration 0009.
sa.Index("tasks_by_owner", tasks.c.owner_hash, tasks.c.status)

#: Answered confirmations and operator approvals (``gateway.broker.confirmations``): a SHA-256 of
#: what the answer is bound to, its status (``taken``, ``declined``; for an operator's approval
#: also ``pending``, ``approved``, ``refused``, ``done``) and until when it is kept. An approval
#: also keeps what the operator is shown (``ticket``, ``agent``, ``tool``, ``what``, ``why``) and
#: the decision (``decided_by``, ``decided_at``, ``note``).
confirmations = sa.Table(
    "confirmations",
    metadata,
    sa.Column("key_hash", sa.Text, primary_key=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
    sa.Column("ticket", sa.Text, unique=True),
    sa.Column("agent", sa.Text),
    sa.Column("tool", sa.Text),
    sa.Column("what", sa.Text),
    sa.Column("why", sa.Text),
    sa.Column("decided_by", sa.Text),
    sa.Column("decided_at", sa.Float),
    sa.Column("note", sa.Text),
    sa.Index("confirmations_by_expiry", "expires"),
    sa.Index("confirmations_by_status", "status"),
)

# Added by migration 0010.
#: Running gateways (``gateway.broker.replicas``): each writes its row every ``every`` seconds
#: (``last_seen``, Unix seconds, its own clock) and deletes it when it stops cleanly; a row not
#: written for three heartbeats is a replica gone (killed, frozen, cut off from the database).
replicas = sa.Table(
    "replicas",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("version", sa.Text, nullable=False),
    sa.Column("started", sa.Float, nullable=False),
    sa.Column("last_seen", sa.Float, nullable=False),
    sa.Column("every", sa.Float, nullable=False),
)
