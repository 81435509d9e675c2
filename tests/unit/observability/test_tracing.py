"""OpenTelemetry traces of the in-process gateway, exported over OTLP/HTTP to a receiver in the test.

A ``tools/call`` whose caller sent a trace context (``params._meta.traceparent`` in the 2026-07-28
era, the HTTP ``traceparent`` header in the 2025-11-25 one) makes one trace: the caller's span →
the gateway's ``tools/call <tool>`` span → one span per GitLab attempt, and GitLab receives that
attempt's ``traceparent``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.config import Settings
from gateway.observability import tracing
from gateway.server.app import create_app
from gateway.server.services import build_services
from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Tool, ToolInput
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.unit.mcp.helpers import Mcp, modern_headers, modern_meta

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SECRET_QUERY = "s3cr3t-query-value"


class NoInput(ToolInput):
    pass


async def project(ctx: ToolContext, args: NoInput) -> dict[str, Any]:
    answer = await ctx.gitlab.rest("GET", "/projects/{id}", path_params={"id": 7}, params={"q": SECRET_QUERY})
    return {"id": answer["id"]}


TOOLS = [
    Tool(
        name="project",
        description="A project.",
        input_model=NoInput,
        handler=project,
        annotations=READ_ONLY,
        toolset="ci",
    )
]


@pytest.fixture
async def receiver(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[OtlpReceiver]:
    sink = await OtlpReceiver().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    assert tracing.configure()
    try:
        yield sink
    finally:
        await asyncio.to_thread(tracing.shutdown)
        await sink.stop()


class Traced(Mcp):
    #: GitLab's next answers' statuses (then 200s).
    statuses: list[int]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.statuses = []


@pytest.fixture
async def gateway(
    aiohttp_client: Any, make_settings: Callable[..., Settings], at_head: Callable[[Settings], Settings]
) -> AsyncIterator[Traced]:
    """A raw client on an app serving ``project``; its GitLab answers 200 and keeps the requests."""
    requests: list[httpx.Request] = []

    def gitlab(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(mcp.statuses.pop(0) if mcp.statuses else 200, json={"id": 7})

    gitlab_http = httpx.AsyncClient(transport=httpx.MockTransport(gitlab))
    app = create_app(
        at_head(make_settings()), services=partial(build_services, gitlab_http=gitlab_http), tools=TOOLS
    )

    async def close(app: web.Application) -> None:
        await gitlab_http.aclose()

    app.on_cleanup.append(close)
    mcp = Traced(await aiohttp_client(app), app)
    mcp.gitlab_requests = requests
    yield mcp


def by_name(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    [span] = [s for s in spans if s.name == name]
    return span


async def exported(receiver: OtlpReceiver, count: int) -> list[ReceivedSpan]:
    await asyncio.to_thread(tracing.force_flush)
    return await receiver.wait_for(count)


def check_trace(spans: list[ReceivedSpan], gitlab: httpx.Request) -> None:
    call = by_name(spans, "tools/call project")
    attempt = by_name(spans, "GET /projects/{id}")
    assert (call.trace_id, call.parent_span_id) == (CALLER_TRACE, CALLER_SPAN)
    assert (attempt.trace_id, attempt.parent_span_id) == (CALLER_TRACE, call.span_id)
    assert call.attributes["mcp.method.name"] == "tools/call"
    assert call.attributes["gen_ai.tool.name"] == "project"
    assert call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert call.service_name == "gitlab-mcp-gateway"
    assert attempt.attributes["http.request.method"] == "GET"
    assert attempt.attributes["url.template"] == "/projects/{id}"
    assert attempt.attributes["http.response.status_code"] == 200
    # GitLab gets the attempt's span as its parent.
    assert gitlab.headers["traceparent"] == f"00-{CALLER_TRACE}-{attempt.span_id}-01"
    # Nothing a span carries holds the token or a query string value.
    text = repr(spans)
    assert "glpat-service-token" not in text and SECRET_QUERY not in text


async def test_modern_call_continues_the_trace_of_its_meta_traceparent(
    receiver: OtlpReceiver, gateway: Mcp, caplog: pytest.LogCaptureFixture
) -> None:
    gateway.version = "2026-07-28"
    params = {
        "name": "project",
        "arguments": {},
        "_meta": modern_meta(traceparent=TRACEPARENT, tracestate="rojo=00f067aa0ba902b7"),
    }
    with caplog.at_level(logging.INFO, logger="gateway.mcp"):
        answer = await gateway.rpc("tools/call", params, headers=modern_headers("tools/call", "project"))
    assert answer["result"]["structuredContent"] == {"id": 7}, answer
    spans = await exported(receiver, 2)
    [gitlab] = gateway.gitlab_requests
    check_trace(spans, gitlab)
    call = by_name(spans, "tools/call project")
    assert call.attributes["mcp.protocol.version"] == "2026-07-28"
    [line] = [r for r in caplog.records if r.getMessage() == "mcp request"]
    assert getattr(line, "trace_id", None) == CALLER_TRACE


async def test_legacy_call_continues_the_trace_of_its_http_traceparent(
    receiver: OtlpReceiver, gateway: Mcp
) -> None:
    await gateway.initialize()
    answer = await gateway.rpc(
        "tools/call",
        {"name": "project", "arguments": {}},
        headers={"traceparent": TRACEPARENT, "X-Agent-Id": "dev"},
    )
    assert answer["result"]["structuredContent"] == {"id": 7}, answer
    spans = await exported(receiver, 2)
    [gitlab] = gateway.gitlab_requests
    check_trace(spans, gitlab)
    call = by_name(spans, "tools/call project")
    assert isinstance(call.attributes["mcp.session.id"], str)
    # Which agent made the call, as the access line and the metrics name it.
    assert call.attributes["gen_ai.agent.id"] == "dev"


async def test_meta_wins_over_the_header_which_becomes_a_link(receiver: OtlpReceiver, gateway: Mcp) -> None:
    gateway.version = "2026-07-28"
    other = "0af7651916cd43dd8448eb211c80319c"
    params = {"name": "project", "arguments": {}, "_meta": modern_meta(traceparent=TRACEPARENT)}
    headers = {**modern_headers("tools/call", "project"), "traceparent": f"00-{other}-b7ad6b7169203331-01"}
    await gateway.rpc("tools/call", params, headers=headers)
    call = by_name(await exported(receiver, 2), "tools/call project")
    assert call.trace_id == CALLER_TRACE
    assert call.links == [(other, "b7ad6b7169203331")]


async def test_broker_operation_is_a_child_span(receiver: OtlpReceiver) -> None:
    async def handler(ctx: object, args: object) -> dict[str, Any]:
        return {}

    traced = tracing.broker_operation("get_phase_plan", handler)
    span = tracing.mcp_span("tools/call", 1, {"traceparent": TRACEPARENT}, {})
    await traced(None, None)
    span.finish(tool="get_phase_plan", outcome="ok", tool_error=False, session=None)
    spans = await exported(receiver, 2)
    call, broker = by_name(spans, "tools/call get_phase_plan"), by_name(spans, "broker get_phase_plan")
    assert broker.parent_span_id == call.span_id
    assert broker.attributes["gateway.broker.operation"] == "get_phase_plan"


async def test_off_without_an_endpoint(monkeypatch: pytest.MonkeyPatch, gateway: Mcp) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not tracing.configure() and not tracing.ENABLED
    await gateway.initialize()
    await gateway.rpc(
        "tools/call", {"name": "project", "arguments": {}}, headers={"traceparent": TRACEPARENT}
    )
    [gitlab] = gateway.gitlab_requests
    assert "traceparent" not in gitlab.headers


def test_the_standard_switches_turn_it_off() -> None:
    assert tracing.endpoint_configured(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}
    )
    assert not tracing.endpoint_configured({})
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not tracing.endpoint_configured({**on, "OTEL_SDK_DISABLED": "true"})
    assert not tracing.endpoint_configured({**on, "OTEL_TRACES_EXPORTER": "none"})


async def test_each_gitlab_attempt_is_a_span_and_carries_its_own_traceparent(
    receiver: OtlpReceiver, gateway: Traced
) -> None:
    gateway.statuses = [503]
    await gateway.initialize()
    answer = await gateway.rpc(
        "tools/call", {"name": "project", "arguments": {}}, headers={"traceparent": TRACEPARENT}
    )
    assert answer["result"]["structuredContent"] == {"id": 7}, answer
    spans = await exported(receiver, 3)
    call = by_name(spans, "tools/call project")
    first, second = [s for s in spans if s.name == "GET /projects/{id}"]
    assert first.parent_span_id == second.parent_span_id == call.span_id
    assert (first.attributes["http.response.status_code"], first.attributes["error.type"]) == (503, "503")
    assert "http.request.resend_count" not in first.attributes
    assert second.attributes["http.request.resend_count"] == 1
    sent = [r.headers["traceparent"] for r in gateway.gitlab_requests]
    assert sent == [f"00-{CALLER_TRACE}-{s.span_id}-01" for s in (first, second)]


async def test_the_sampler_in_effect_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    try:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
        assert tracing.configure()
        assert tracing.sampler() == "TraceIdRatioBased{0.1}"
        await asyncio.to_thread(tracing.shutdown)
        # What an operator mistypes: the SDK samples every call, and the name says so.
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "10%")
        assert tracing.configure()
        assert tracing.sampler() == "TraceIdRatioBased{1.0}"
    finally:
        await asyncio.to_thread(tracing.shutdown)
    assert tracing.sampler() is None
