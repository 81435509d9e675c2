"""Traces end to end: the gateway process, configured with the standard ``OTEL_*`` variables, exports
over OTLP/HTTP to a receiver in the test; the official SDK client calls ``get_pipeline`` with a trace
context, in the 2026-07-28 era (``_meta.traceparent``) and the 2025-11-25 one (HTTP header).

The batch delay is set far beyond the test's length, so the spans arrive only because the gateway
exports what it holds when it stops.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.e2e.harness import GatewayProcess, mcp_client
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

MODERN_TRACE, MODERN_PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
LEGACY_TRACE, LEGACY_PARENT = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def check(spans: list[ReceivedSpan], trace_id: str, parent: str, traceparents: set[str]) -> None:
    """One ``tools/call get_pipeline`` span under the caller's, GitLab attempts under it, each of
    which GitLab received as its ``traceparent``."""
    in_trace = [s for s in spans if s.trace_id == trace_id]
    [call] = [s for s in in_trace if s.name == "tools/call get_pipeline"]
    assert call.parent_span_id == parent
    assert call.service_name == "gateway-under-test"
    assert call.attributes["gen_ai.tool.name"] == "get_pipeline"
    attempts = [s for s in in_trace if s.parent_span_id == call.span_id]
    assert attempts and all(s.name.startswith(("GraphQL ", "GET ")) for s in attempts), attempts
    assert {f"00-{trace_id}-{s.span_id}-01" for s in attempts} == traceparents


async def test_a_tool_call_is_one_trace_from_the_caller_to_gitlab(
    fresh_standin: Standin, tmp_path: Path
) -> None:
    receiver = await OtlpReceiver().start()
    env = {
        **fresh_standin.env(),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "gateway-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
    }
    gateway = GatewayProcess(env=env, state_dir=tmp_path / "state").start()
    args = {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID}
    try:
        async with mcp_client(gateway.mcp_url) as client:
            meta = {"traceparent": f"00-{MODERN_TRACE}-{MODERN_PARENT}-01"}
            assert not (await client.call_tool("get_pipeline", args, meta=meta)).is_error  # type: ignore[arg-type]
        modern_seen = {r["traceparent"] for r in fresh_standin.control.requests()}
        fresh_standin.control.clear_requests()
        headers = {"traceparent": f"00-{LEGACY_TRACE}-{LEGACY_PARENT}-01"}
        async with mcp_client(gateway.mcp_url, mode="legacy", headers=headers) as client:
            assert not (await client.call_tool("get_pipeline", args)).is_error
        legacy_seen = {r["traceparent"] for r in fresh_standin.control.requests()}
        assert receiver.spans == []  # held in the batch until the gateway stops
    finally:
        assert await asyncio.to_thread(gateway.stop) == 0
    try:
        spans = await receiver.wait_for(4)
    finally:
        await receiver.stop()
    check(spans, MODERN_TRACE, MODERN_PARENT, modern_seen)
    check(spans, LEGACY_TRACE, LEGACY_PARENT, legacy_seen)
    # The access line names each call's trace.
    log = gateway.log()
    for trace_id in (MODERN_TRACE, LEGACY_TRACE):
        assert re.search(rf"tool=get_pipeline .* trace_id={trace_id}$", log, re.MULTILINE), log[-3000:]
