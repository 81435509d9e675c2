"""Metric names, units and label sets (Prometheus naming: https://prometheus.io/docs/practices/naming/)."""

from __future__ import annotations

import math
import platform
import re

import httpx
import pytest
import respx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import GitLabSettings
from gateway.errors import REASONS
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.credentials import Credential
from gateway.gitlab.errors import GitLabNotFound
from gateway.gitlab.urls import encode_project
from gateway.mcp.protocol.wire import _LABELS
from gateway.observability.metrics import METRICS, Metrics
from tests.unit.mcp.conftest import MakeMcp

#: The documented metrics, by name (the attribute teammates use → the exposed family).
REQUIRED = {
    "mcp_requests": ("gateway_mcp_requests", "counter", ["method", "outcome"]),
    "tool_calls": ("gateway_tool_calls", "counter", ["tool", "toolset", "outcome", "source", "agent"]),
    "tool_latency": ("gateway_tool_call_duration_seconds", "histogram", ["tool"]),
    "gitlab_requests": ("gateway_gitlab_requests", "counter", ["operation", "status_class"]),
    "gitlab_latency": ("gateway_gitlab_request_duration_seconds", "histogram", ["operation"]),
    "gitlab_retries": ("gateway_gitlab_retries", "counter", ["operation"]),
    "gitlab_rate_limit_wait": ("gateway_gitlab_rate_limit_wait_seconds", "counter", []),
    "cache_hits": ("gateway_cache_hits", "counter", ["cache"]),
    "cache_misses": ("gateway_cache_misses", "counter", ["cache"]),
    "cache_evictions": ("gateway_cache_evictions", "counter", ["cache"]),
    "cache_entries": ("gateway_cache_entries", "gauge", ["cache"]),
    "cache_bytes": ("gateway_cache_size_bytes", "gauge", ["cache"]),
    "sessions_issued": ("gateway_mcp_sessions_issued", "counter", []),
    "session_rejections": ("gateway_mcp_session_rejections", "counter", ["reason"]),
    "sessions_ended": ("gateway_mcp_sessions_ended", "gauge", []),
    "session_ttl_seconds": ("gateway_mcp_session_ttl_seconds", "gauge", []),
    "sse_streams_open": ("gateway_mcp_sse_streams_open", "gauge", []),
    "broker_state": ("gateway_broker_state", "gauge", ["state"]),
    "broker_queue_depth": ("gateway_broker_queue_depth", "gauge", ["agent"]),
    "broker_waits_open": ("gateway_broker_waits_open", "gauge", []),
    "broker_database_up": ("gateway_broker_database_up", "gauge", []),
    "broker_state_since": ("gateway_broker_state_since_timestamp_seconds", "gauge", []),
    "broker_agent_last_seen": ("gateway_broker_agent_last_seen_timestamp_seconds", "gauge", ["agent"]),
    "broker_agent_waiting": ("gateway_broker_agent_waiting", "gauge", ["agent"]),
    "gitlab_rate_limited": ("gateway_gitlab_rate_limited", "counter", ["operation"]),
    "gitlab_reachable": ("gateway_gitlab_reachable", "gauge", []),
    "ready": ("gateway_ready", "gauge", []),
    "gitlab_checked": ("gateway_gitlab_last_check_timestamp_seconds", "gauge", []),
    "console_sign_ins_failed": ("gateway_console_sign_ins_failed", "counter", ["reason"]),
    "sign_in_events": ("gateway_sign_in_events", "counter", ["event"]),
    "build_info": ("gateway_build", "info", []),
}


@pytest.mark.parametrize("attribute", sorted(REQUIRED))
def test_required_metrics_exist_with_their_labels(attribute: str) -> None:
    name, kind, labels = REQUIRED[attribute]
    metric = getattr(Metrics(), attribute)
    assert metric._name == name
    assert metric._type == kind
    assert list(metric._labelnames) == labels


def test_names_follow_prometheus_conventions() -> None:
    metrics = Metrics()
    metrics.tool_latency.labels("get_pipeline").observe(0.1)
    families = list(text_string_to_metric_families(generate_latest(metrics.registry).decode()))
    names = {f.name for f in families}
    assert {"gateway_tool_calls", "gateway_build_info", "process_resident_memory_bytes"} <= names
    for family in families:
        assert family.name.startswith(("gateway_", "process_")), family.name
        assert re.fullmatch(r"[a-z][a-z0-9_]*", family.name)
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
        if family.type == "gauge":
            assert not family.name.endswith("_total"), family.name
        assert "_ms" not in family.name and "milliseconds" not in family.name  # base units only


def test_build_info() -> None:
    from gateway import REVISION, __version__

    text = generate_latest(Metrics().registry).decode()
    python = platform.python_version()
    assert (
        f'gateway_build_info{{python="{python}",revision="{REVISION}",version="{__version__}"}} 1.0' in text
    )
    assert REVISION == "unknown"  # a checkout run as it is: only a build bakes a revision in (setup.py)


def test_one_registry_per_app() -> None:
    first, second = Metrics(), Metrics()  # no "Duplicated timeseries" error
    first.tool_calls.labels("get_pipeline", "ci", "ok", "tool", "pm").inc()
    assert (
        second.registry.get_sample_value(
            "gateway_tool_calls_total",
            {"tool": "get_pipeline", "toolset": "ci", "outcome": "ok", "source": "tool", "agent": "pm"},
        )
        is None
    )


async def test_gitlab_operations_are_route_templates_never_raw_paths() -> None:
    metrics = Metrics()
    credential = Credential(header="PRIVATE-TOKEN", token="glpat-metrics-000000000")
    async with httpx.AsyncClient() as http:
        client = GitLabClient(GitLabSettings(url="https://gitlab.example.com"), metrics=metrics, http=http)
        with respx.mock(base_url="https://gitlab.example.com") as mock:
            mock.get(url__regex=r"/api/v4/projects/.+/repository/tags").mock(
                return_value=httpx.Response(404, json={})
            )
            for project in ("secret-group/internal-project", "other/one", "x/y/z"):
                with pytest.raises(GitLabNotFound):
                    await client.rest(
                        "GET",
                        "/projects/{id}/repository/tags",
                        credential=credential,
                        path_params={"id": encode_project(project)},
                    )
    text = generate_latest(metrics.registry).decode()
    assert "secret-group" not in text and "internal-project" not in text and "glpat" not in text
    assert (
        metrics.registry.get_sample_value(
            "gateway_gitlab_requests_total",
            {"operation": "GET /projects/{id}/repository/tags", "status_class": "4xx"},
        )
        == 3
    )


async def test_gitlab_429s_are_counted_by_operation() -> None:
    metrics = Metrics()
    settings = GitLabSettings(url="https://gitlab.example.com")
    credential = Credential(header="PRIVATE-TOKEN", token="glpat-metrics-000000000")
    async with httpx.AsyncClient() as http:
        client = GitLabClient(settings, metrics=metrics, http=http, sleep=_no_sleep)
        with respx.mock(base_url="https://gitlab.example.com") as mock:
            mock.get("/api/v4/version").mock(
                side_effect=[httpx.Response(429, headers={"Retry-After": "0"}), httpx.Response(200, json={})]
            )
            await client.rest("GET", "/version", credential=credential)
    labels = {"operation": "GET /version"}
    assert metrics.registry.get_sample_value("gateway_gitlab_rate_limited_total", labels) == 1
    assert (
        metrics.registry.get_sample_value("gateway_gitlab_requests_total", {**labels, "status_class": "2xx"})
        == 1
    )


async def _no_sleep(seconds: float) -> None:
    return None


async def test_caller_input_never_becomes_a_label(mcp_factory: MakeMcp) -> None:
    """Junk methods, unknown tools and odd arguments keep every label inside its closed set."""
    client = await mcp_factory()
    await client.initialize()
    junk = ["tools/call/../../etc/passwd", "x" * 300, "glpat-SecretInAMethodName0000", "Tools/Call"]
    for method in junk:
        await client.rpc(method, {})
    for name in ("no_such_tool", "glpat-SecretAsAToolName00000", "echo\n"):
        await client.rpc("tools/call", {"name": name, "arguments": {}})
    await client.rpc("tools/call", {"name": "echo", "arguments": {"text": "glpat-SecretInArguments0000"}})
    await client.rpc("tools/call", {"name": "say", "arguments": {"text": "alias"}})  # counted as echo

    registry = client.app[METRICS].registry
    text = generate_latest(registry).decode()
    for value in [*junk, "no_such_tool", "glpat", "Secret", "alias"]:
        assert value not in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    methods = {s.labels["method"] for s in families["gateway_mcp_requests"].samples}
    assert methods <= set(_LABELS) | {"other", "response"}
    assert "other" in methods
    tools = {s.labels["tool"] for s in families["gateway_tool_calls"].samples}
    assert tools == {"echo"}
    outcomes = {s.labels["outcome"] for s in families["gateway_tool_calls"].samples}
    assert outcomes <= {"ok", "internal_error", "cancelled", *REASONS}


def test_gitlab_reachability_and_readiness_are_unknown_before_the_first_check() -> None:
    registry = Metrics().registry
    # NaN: "== 0" is false, so no outage alert fires for a gateway that has not checked.
    for name in ("gateway_gitlab_reachable", "gateway_ready"):
        value = registry.get_sample_value(name)
        assert value is not None and math.isnan(value), name
