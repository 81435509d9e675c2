"""A tiny OTLP/HTTP trace receiver on 127.0.0.1: ``POST /v1/traces`` with protobuf bodies, decoded
with ``opentelemetry-proto`` into :class:`ReceivedSpan` records (the tests' collector; the
benchmark's sink with ``keep=False``)."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span: ids as lower-case hex, attributes as Python values."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    service_name: str
    links: list[tuple[str, str]] = field(default_factory=list)


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which else None


class OtlpReceiver:
    """``await start()`` → listening on ``url``; spans land in :attr:`spans` (when ``keep``)."""

    def __init__(self, *, keep: bool = True) -> None:
        self.keep = keep
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.span_count = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests += 1
        if request.headers.get("Content-Type") != "application/x-protobuf":
            return web.Response(status=415)
        message = ExportTraceServiceRequest.FromString(body)
        for resource_spans in message.resource_spans:
            service = next(
                (_value(a.value) for a in resource_spans.resource.attributes if a.key == "service.name"), ""
            )
            for scope_spans in resource_spans.scope_spans:
                self.span_count += len(scope_spans.spans)
                if not self.keep:
                    continue
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status_code=span.status.code,
                            service_name=service,
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def start(self, port: int = 0) -> OtlpReceiver:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[ReceivedSpan]:
        """The spans, once at least ``count`` arrived (or ``timeout`` passed)."""
        end = time.monotonic() + timeout
        while len(self.spans) < count and time.monotonic() < end:
            await asyncio.sleep(0.05)
        return self.spans
