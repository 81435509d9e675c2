"""What each attempt at a GitLab request leaves behind, whether it was answered or not: its count
and latency in ``/metrics``, a note on the MCP request's access line, a DEBUG line, and the end of
its span (tracing on). Shared by the buffered requests (:mod:`gateway.gitlab.client`) and the
streamed ones (:mod:`gateway.gitlab.streaming`).
"""

from __future__ import annotations

import logging
import time

from opentelemetry.trace import Span

from gateway.gitlab.call import GitLabCall
from gateway.observability import tracing
from gateway.observability.access import note_gitlab_request
from gateway.observability.metrics import Metrics

log = logging.getLogger("gateway.gitlab")


def record_attempt(
    metrics: Metrics | None,
    call: GitLabCall,
    status_class: str,
    started: float,
    *,
    status: int | None = None,
    error: str | None = None,
    span: Span | None = None,
) -> None:
    """Count and time one attempt begun at ``started`` (``time.perf_counter()``).

    Args:
        status_class: the metrics label: ``2xx``...``5xx``, ``error`` (no answer) or ``cancelled``.
        status: GitLab's HTTP status, when it answered.
        error: what failed instead (an exception's name), when it did not.
        span: the attempt's span, ended here.
    """
    elapsed = time.perf_counter() - started
    if span is not None:
        tracing.end_gitlab_span(span, status, error)
    if metrics is not None:
        metrics.gitlab_requests.labels(call.operation, status_class).inc()
        metrics.gitlab_latency.labels(call.operation).observe(elapsed)
        if status == 429:
            metrics.gitlab_rate_limited.labels(call.operation).inc()
    note_gitlab_request(call.operation, status if status is not None else error)
    log.debug(
        "gitlab request",
        extra={
            "operation": call.operation,
            "method": call.method,
            "status": status,
            "error": error,
            "duration_ms": round(elapsed * 1000, 2),
            "request_id": call.request_id,
        },
    )
