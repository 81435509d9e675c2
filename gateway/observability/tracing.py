"""OpenTelemetry traces: a span per MCP request, with its GitLab attempts and broker operations.

Off unless an OTLP endpoint is configured (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT``; OTLP over HTTP/protobuf). The SDK reads the other standard
variables itself: ``OTEL_SERVICE_NAME`` (default ``gitlab-mcp-gateway``), ``OTEL_TRACES_SAMPLER``
and its argument, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_BSP_SCHEDULE_DELAY`` and the rest;
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` keep it off.

Callers test :data:`ENABLED` (one module attribute read) before they call anything here, so with
tracing off no span object is made and no header is parsed or written.

Spans follow OpenTelemetry's semantic conventions for MCP (``mcp.method.name``,
``gen_ai.tool.name``, ``mcp.session.id``, ``jsonrpc.request.id``, ``error.type`` ``tool_error``)
and for HTTP clients (``http.request.method``, ``url.template``, ``http.response.status_code``,
``http.request.resend_count``). The parent of the MCP span is the caller's: ``params._meta``'s
``traceparent``/``tracestate`` (the keys MCP reserves for it), else the HTTP ``traceparent``
header; each GitLab request carries its attempt's span as ``traceparent``.

Nothing that could hold a secret is recorded: a GitLab span names the route template (never the
path, its query string or a body), and no tool argument or result is attached.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

from opentelemetry import context as otel_context
from opentelemetry.trace import (
    Link,
    Span,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway import __version__
from gateway.observability.access import TRACE

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

T = TypeVar("T")

#: True once :func:`configure` started an exporter. The one check on the hot path.
ENABLED: bool = False

DEFAULT_SERVICE_NAME: Final = "gitlab-mcp-gateway"
_PROPAGATOR: Final = TraceContextTextMapPropagator()
_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def endpoint_configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint, and nothing turning them off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def traces_endpoint(environ: Mapping[str, str] = os.environ) -> str:
    """Where spans go: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as it is, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``/v1/traces`` appended, as the OTLP/HTTP exporter does
    (https://opentelemetry.io/docs/specs/otel/protocol/exporter/)."""
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    return environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip().rstrip("/") + "/v1/traces"


def configure(environ: Mapping[str, str] = os.environ) -> bool:
    """Start exporting spans when the environment names an endpoint; returns :data:`ENABLED`.

    The provider is the gateway's own (not the global one), so a library that also uses
    OpenTelemetry cannot change where the gateway's spans go.
    """
    global ENABLED, _tracer, _provider
    if not endpoint_configured(environ):
        return False
    # Imported here: a gateway without tracing does not load the SDK.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes: dict[str, str] = {"service.version": __version__}
    if not environ.get("OTEL_SERVICE_NAME", "").strip():
        attributes["service.name"] = DEFAULT_SERVICE_NAME
    created = Resource.create(attributes)

    class _Resource(Resource):
        # The OTLP encoder groups every exported span by its resource, and the stock hash is a
        # sorted JSON dump of the attributes each time; they never change after start.
        _hash = hash(created)

        def __hash__(self) -> int:
            return self._hash

    resource = _Resource(created.attributes, created.schema_url)
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _provider, _tracer = provider, provider.get_tracer("gateway", __version__)
    ENABLED = True
    return True


def shutdown() -> None:
    """Export the spans still queued (blocking, up to the exporter's timeout) and stop."""
    global ENABLED, _tracer, _provider
    provider, ENABLED, _tracer, _provider = _provider, False, None, None
    if provider is not None:
        provider.shutdown()


def sampler() -> str | None:
    """The sampler in effect, as the SDK describes it (``TraceIdRatioBased{0.1}``,
    ``ParentBased{root:AlwaysOnSampler,...}``); None while tracing is off. The SDK falls back to
    sampling every call on a sampler argument it cannot read, so the start-up line names it."""
    return _provider.sampler.get_description() if _provider is not None else None


def force_flush() -> bool:
    """Export the spans queued so far (blocking); True when done in time."""
    return _provider.force_flush() if _provider is not None else True


def _parent(meta: Mapping[str, Any], headers: Mapping[str, str]) -> tuple[otel_context.Context, list[Link]]:
    """The caller's context: ``_meta``'s, else the HTTP header's. When both are there, the HTTP
    one is linked (MCP semantic conventions: the transport's context is recorded as a link)."""
    http = _PROPAGATOR.extract(
        {k: v for k in ("traceparent", "tracestate") if (v := headers.get(k)) is not None}
    )
    carrier = {k: v for k in ("traceparent", "tracestate") if isinstance(v := meta.get(k), str)}
    if not carrier:
        return http, []
    parent = _PROPAGATOR.extract(carrier)
    http_span = get_current_span(http).get_span_context()
    if http_span.is_valid and http_span != get_current_span(parent).get_span_context():
        return parent, [Link(http_span)]
    return parent, []


class McpSpan:
    """The span of one MCP request, current for everything it runs (tasks started inside it too)."""

    __slots__ = ("_token", "method", "span")

    def __init__(self, span: Span, method: str) -> None:
        self.span = span
        self.method = method
        self._token = otel_context.attach(set_span_in_context(span))

    def finish(
        self,
        *,
        tool: str | None,
        outcome: str,
        tool_error: bool,
        session: str | None,
        version: str | None = None,
        agent: str | None = None,
        user: str | None = None,
    ) -> None:
        """Name it after the tool, say who called (``agent``: a configured agent id, never a
        value a caller made up; ``user``: the GitLab username of a person signed in through GitLab,
        never a token) and how it ended, and end it."""
        span = self.span
        # One set_attributes: the SDK takes the span's lock once per call.
        attributes: dict[str, str] = {}
        if version is not None:
            attributes["mcp.protocol.version"] = version
        if tool is not None:
            span.update_name(f"{self.method} {tool}")
            attributes["gen_ai.tool.name"] = tool
            attributes["gen_ai.operation.name"] = "execute_tool"
        if session is not None:
            attributes["mcp.session.id"] = session
        if agent is not None:
            # OpenTelemetry's GenAI conventions: the agent the call is made for.
            attributes["gen_ai.agent.id"] = agent
        if user is not None:
            # OpenTelemetry's general conventions: the end user the request is made for.
            attributes["enduser.id"] = user
        if outcome != "ok":
            attributes["error.type"] = "tool_error" if tool_error else outcome
            attributes["gateway.outcome"] = outcome
            span.set_status(Status(StatusCode.ERROR, outcome))
        if attributes:
            span.set_attributes(attributes)
        otel_context.detach(self._token)
        span.end()


def mcp_span(
    method: str,
    request_id: str | int,
    meta: Mapping[str, Any],
    headers: Mapping[str, str],
) -> McpSpan:
    """Start the server span of one MCP request (call only when :data:`ENABLED`), and note its
    trace id for the access line. ``method``: from a closed set (it names the span)."""
    assert _tracer is not None
    parent, links = _parent(meta, headers)
    span = _tracer.start_span(
        method,
        context=parent,
        kind=SpanKind.SERVER,
        links=links,
        attributes={
            "mcp.method.name": method,
            "jsonrpc.request.id": str(request_id)[:128],
            "network.transport": "tcp",
            "network.protocol.name": "http",
        },
    )
    trace = TRACE.get()
    if trace is not None and trace.trace_id is None:
        trace.trace_id = format(span.get_span_context().trace_id, "032x")
    return McpSpan(span, method)


def gitlab_span(method: str, operation: str, resend_count: int, headers: MutableMapping[str, str]) -> Span:
    """Start the client span of one GitLab attempt (call only when :data:`ENABLED`) and put its
    ``traceparent`` in ``headers``. ``operation`` is a route template or a GraphQL operation."""
    assert _tracer is not None
    template = operation.split(" ", 1)[1] if operation.startswith(method + " ") else None
    attributes: dict[str, str | int] = {"http.request.method": method, "gateway.gitlab.operation": operation}
    if template is not None:
        attributes["url.template"] = template
    if resend_count:
        attributes["http.request.resend_count"] = resend_count
    span = _tracer.start_span(
        f"{method} {template}" if template else f"GraphQL {operation}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
    )
    _PROPAGATOR.inject(headers, context=set_span_in_context(span))
    return span


def end_gitlab_span(span: Span, status: int | None, error: str | None) -> None:
    """End a GitLab attempt's span with GitLab's status, or the error class when none came."""
    if status is not None:
        span.set_attribute("http.response.status_code", status)
        if status >= 400:
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))
    elif error is not None:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current span's ``traceparent`` in ``headers`` (call only when :data:`ENABLED`)."""
    _PROPAGATOR.inject(headers)


def broker_operation(name: str, handler: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """``handler`` run under an internal span ``broker {name}`` when tracing is on."""

    async def traced(*args: Any) -> T:
        if not ENABLED or _tracer is None:
            return await handler(*args)
        with _tracer.start_as_current_span(
            f"broker {name}", kind=SpanKind.INTERNAL, attributes={"gateway.broker.operation": name}
        ):
            return await handler(*args)

    traced.__name__ = getattr(handler, "__name__", name)
    traced.__doc__ = handler.__doc__
    return traced
