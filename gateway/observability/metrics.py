"""Prometheus metrics: one registry per app, bounded label sets, conventional names.

Every label value comes from a closed set: MCP method names the dispatcher knows (else
``other``: ``gateway.mcp.protocol.wire.method_label``), declared tool names (a call to an unknown
tool is not counted per tool), GraphQL operation names or REST route templates from the
gateway's own code (never a raw path), status classes (``2xx``..``5xx``, ``error``), cache names
from code, broker states and agent ids from configuration. Nothing a caller sends (paths,
project names, tokens, session ids, error texts) becomes a label value.

Names follow the Prometheus conventions (https://prometheus.io/docs/practices/naming/): a
``gateway_`` prefix, base units (``_seconds``, ``_bytes``), ``_total`` on counters, ``_info``
on the build information. ``docs/operations.md`` lists every metric; the Grafana dashboard in
``deploy/grafana/`` only queries these names (checked by ``tests/unit/test_deploy.py``).

Exposed at ``/metrics`` in the Prometheus text format via ``prometheus_client``, together with
the standard ``process_*`` metrics of the gateway's process.
"""

from __future__ import annotations

import math
import platform

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector

from gateway import REVISION, __version__

#: Labels that say who called, after a metric's own (``gateway.mcp.protocol.telemetry.CallerLabels``
#: gives their values): the agent, from the configured agents only. A ``user`` label joins here
#: once people sign in.
CALLER_LABELS = ("agent",)
#: The agent label of every caller that is not a configured agent (no client token, no or an
#: unknown ``X-Agent-Id``): one bucket, so nothing a caller sends adds a series.
ANONYMOUS_AGENT = "anonymous"

#: Seconds; the same buckets inbound (tool calls) and upstream (GitLab) so the two compare.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """All of the gateway's metrics, registered on ``self.registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.build_info = Info(
            "gateway_build", "Gateway version, git revision of the build, and Python version", registry=r
        )
        self.build_info.info(
            {"version": __version__, "revision": REVISION, "python": platform.python_version()}
        )
        # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds... (Linux).
        ProcessCollector(registry=r)

        # MCP transport
        self.mcp_requests = Counter(
            "gateway_mcp_requests_total",
            "JSON-RPC messages received on /mcp, by method and outcome (ok, error, rejected)",
            ["method", "outcome"],
            registry=r,
        )
        # Legacy-era sessions are sealed ids (any replica opens them): counted as issued, refused
        # by reason, and ended (by DELETE, kept in the broker's database until they expire).
        self.sessions_issued = Counter(
            "gateway_mcp_sessions_issued_total", "MCP sessions opened by initialize", registry=r
        )
        self.session_rejections = Counter(
            "gateway_mcp_session_rejections_total",
            "Mcp-Session-Id values refused (404), by reason: invalid, expired, ended, foreign",
            ["reason"],
            registry=r,
        )
        self.sessions_ended = Gauge(
            "gateway_mcp_sessions_ended",
            "Sessions ended by DELETE and not yet expired, on every replica (the broker database's "
            "count at its last prune, plus those this replica ended since)",
            registry=r,
        )
        self.session_ttl_seconds = Gauge(
            "gateway_mcp_session_ttl_seconds",
            "Lifetime of an MCP session (server.session_ttl_seconds)",
            registry=r,
        )
        self.sse_streams_open = Gauge("gateway_mcp_sse_streams_open", "SSE response streams open", registry=r)

        # tools
        self.tool_calls = Counter(
            "gateway_tool_calls_total",
            "tools/call by tool, its toolset (broker: no GitLab request, no per-agent limit; unknown "
            "for a name no tool has), outcome (ok, or the error reason) and source: gateway when the "
            "gateway refused the call by its own policy (toolsets, per-agent rate limit, no "
            "passthrough token), tool for the tool's own answer (GitLab's or the broker's); and agent: "
            "the caller's configured agent id, else anonymous",
            ["tool", "toolset", "outcome", "source", *CALLER_LABELS],
            registry=r,
        )
        self.rate_limited = Counter(
            "gateway_rate_limited_total",
            "GitLab tool calls refused by the gateway's per-agent limits, by agent (a configured "
            "agent id, passthrough or anonymous) and limit: calls_per_second (limits.calls_per_second "
            "and burst), max_calls_in_flight, passthrough_auth_failures",
            ["agent", "limit"],
            registry=r,
        )
        self.tool_latency = Histogram(
            "gateway_tool_call_duration_seconds",
            "tools/call latency by tool",
            ["tool"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

        # GitLab client
        self.gitlab_info = Gauge(
            "gateway_gitlab_info",
            "The configured GitLab's version and edition (ce, ee), as last learnt; 1",
            ["version", "edition"],
            registry=r,
        )
        self.gitlab_requests = Counter(
            "gateway_gitlab_requests_total",
            "GitLab requests by operation (GraphQL operation or REST route template) and status class",
            ["operation", "status_class"],
            registry=r,
        )
        self.gitlab_latency = Histogram(
            "gateway_gitlab_request_duration_seconds",
            "GitLab request latency by operation",
            ["operation"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.gitlab_retries = Counter(
            "gateway_gitlab_retries_total", "GitLab requests retried, by operation", ["operation"], registry=r
        )
        self.gitlab_rate_limited = Counter(
            "gateway_gitlab_rate_limited_total",
            "GitLab answers 429 Too Many Requests, by operation (each attempt, retried or not)",
            ["operation"],
            registry=r,
        )
        self.ready = Gauge(
            "gateway_ready",
            "1 when /readyz answers ready, 0 when not ready (its last answer, or the gateway's own "
            "check every 15 s)",
            registry=r,
        )
        self.ready.set(math.nan)  # until /readyz or the gateway's own check has answered
        # Set by the gateway's own check (``gateway.server.health``), every 15 s and with no traffic.
        self.gitlab_reachable = Gauge(
            "gateway_gitlab_reachable",
            "1 when the gateway's last check of GitLab got GitLab's answer (even refusing the token), "
            "0 when it got none, a 5xx or a 429 (checked every 15 s); NaN before the first check",
            registry=r,
        )
        # NaN until the first check: neither reachable nor not (an alert's "== 0" stays quiet on a
        # gateway told not to check, gitlab.startup_check = false, that no probe asks either).
        self.gitlab_reachable.set(math.nan)
        self.gitlab_checked = Gauge(
            "gateway_gitlab_last_check_timestamp_seconds",
            "Unix time of the gateway's last check of GitLab",
            registry=r,
        )
        self.gitlab_rate_limit_wait = Counter(
            "gateway_gitlab_rate_limit_wait_seconds_total",
            "Seconds spent waiting on GitLab's Retry-After",
            registry=r,
        )

        # caches
        self.cache_hits = Counter("gateway_cache_hits_total", "Cache hits", ["cache"], registry=r)
        self.cache_misses = Counter("gateway_cache_misses_total", "Cache misses", ["cache"], registry=r)
        self.cache_evictions = Counter(
            "gateway_cache_evictions_total", "Entries evicted for room or age", ["cache"], registry=r
        )
        self.cache_entries = Gauge("gateway_cache_entries", "Entries held, per cache", ["cache"], registry=r)
        self.cache_bytes = Gauge(
            "gateway_cache_size_bytes", "Approximate bytes held, per cache", ["cache"], registry=r
        )

        # broker
        self.broker_state = Gauge(
            "gateway_broker_state",
            "1 for the broker's current state, 0 for the others",
            ["state"],
            registry=r,
        )
        self.broker_queue_depth = Gauge(
            "gateway_broker_queue_depth", "Messages queued per agent", ["agent"], registry=r
        )
        self.broker_messages_sent = Counter(
            "gateway_broker_messages_sent_total", "Messages queued, by recipient", ["agent"], registry=r
        )
        self.broker_messages_purged = Counter(
            "gateway_broker_messages_purged_total",
            "Delivered messages deleted by the retention rule (broker.retain_delivered_*)",
            registry=r,
        )
        self.broker_messages_delivered = Counter(
            "gateway_broker_messages_delivered_total",
            "Messages handed to a waiting agent",
            ["agent"],
            registry=r,
        )
        self.broker_waits_open = Gauge("gateway_broker_waits_open", "wait_for_message calls open", registry=r)
        # Read from the broker's database at each scrape (``Housekeeping.refresh_for_scrape``), so
        # every replica reports what the database says, whichever replica made the change.
        self.broker_database_up = Gauge(
            "gateway_broker_database_up",
            "1 when the broker's database answered this scrape's read, 0 when it failed or timed out",
            registry=r,
        )
        self.confirmations_pending = Gauge(
            "gateway_confirmations_pending",
            'Approvals waiting for an operator (confirm_by = "operator"; 0 otherwise)',
            registry=r,
        )
        self.broker_state_since = Gauge(
            "gateway_broker_state_since_timestamp_seconds",
            "Unix time the broker entered its current state (the last transition's time)",
            registry=r,
        )
        self.broker_agent_last_seen = Gauge(
            "gateway_broker_agent_last_seen_timestamp_seconds",
            "Unix time of each agent's last broker call (any replica's), for agents that called",
            ["agent"],
            registry=r,
        )
        self.broker_agent_waiting = Gauge(
            "gateway_broker_agent_waiting",
            "1 while this replica holds a wait_for_message of the agent open, else 0",
            ["agent"],
            registry=r,
        )
        self.broker_transitions = Counter(
            "gateway_broker_transitions_total",
            "Broker state transitions",
            ["from_state", "to_state"],
            registry=r,
        )
        self.console_streams_refused = Counter(
            "gateway_console_streams_refused_total",
            "Console live views refused: the sign-in already held console.max_streams_per_session",
            registry=r,
        )
        self.sign_in_events = Counter(
            "gateway_sign_in_events_total",
            "Sign-in through GitLab ([sign_in]), by event: signed_in, refused (allow-list or role), "
            "gitlab_refreshed (one refresh of a person's GitLab token, for every replica), "
            "gitlab_refresh_failed (GitLab did not answer), ended (GitLab refused the refresh: revoked)",
            ["event"],
            registry=r,
        )
        self.console_sign_ins_failed = Counter(
            "gateway_console_sign_ins_failed_total",
            "Console sign-ins refused, by reason: wrong_token (a token that opens nothing), throttled "
            "(the address spent its budget of failed sign-ins, console.sign_in_failures, or all "
            "addresses theirs, console.sign_in_failures_total), not_listed (signed in with GitLab, in "
            "neither console.operators nor console.viewers), sign_in_failed (the GitLab round trip did "
            "not finish)",
            ["reason"],
            registry=r,
        )


#: The app's :class:`Metrics` (``/metrics`` and the metrics listener read it).
METRICS = web.AppKey("metrics", Metrics)
