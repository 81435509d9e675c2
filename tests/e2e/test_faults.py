"""Upstream faults end to end: the real gateway against the GitLab stand-in's fault controls.

For every fault (slow, reset, dropped, 429 with and without ``Retry-After``, 5xx bursts, malformed
and HTML bodies, GraphQL errors with and without partial data, a trickled body, a connection lost
after a mutation was applied): the gateway stays up, the call gets a clear result within its
deadline, no mutation reaches GitLab twice, and ``/metrics`` counts the call under its outcome.

Timeouts are shortened (1.5 s per GitLab request, 4 s of retries) so the whole module takes seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.figures import figure_fixture
from tests.e2e.harness import GatewayProcess
from tests.e2e.rpc import Rpc, error_reason, metric, metric_samples, structured
from tests.standin import dataset as ds
from tests.standin.control import StandinControl
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

TIMEOUT = 1.5
DEADLINE = 4.0
ENV = {
    "GATEWAY_GITLAB__TIMEOUT_SECONDS": str(TIMEOUT),
    "GATEWAY_GITLAB__RETRY_DEADLINE_SECONDS": str(DEADLINE),
    "GATEWAY_GITLAB__MAX_RETRY_AFTER_SECONDS": "2",
    # A call still stuck on a faulty GitLab holds shutdown for this long at most.
    "GATEWAY_SERVER__SHUTDOWN_TIMEOUT_SECONDS": "1",
}
READ = ("get_pipeline", {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID})
CREATE = ("save_pipeline", {"project_id": ds.PROJECT_PATH, "ref": "main"})
MUTATION = {"field": "pipelineCreate"}
#: How far past its deadline a call may end (one second at most).
GRACE = 1.0
#: A call's deadline: retries stop at DEADLINE, and the attempt under way then may last TIMEOUT.
CALL_DEADLINE = DEADLINE + TIMEOUT
#: Seconds each call took, for the printed figure.
ELAPSED: list[float] = []


def _deadline_figure() -> str | None:
    if not ELAPSED:
        return None
    worst = max(ELAPSED)
    past = max(0.0, worst - CALL_DEADLINE)
    return (
        f"faults: {len(ELAPSED)} calls under upstream faults, the slowest {worst:.2f} s against a "
        f"{CALL_DEADLINE:.1f} s deadline: {past:.2f} s past it (at most {GRACE:.0f} s allowed)"
    )


_figure = figure_fixture(_deadline_figure)


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    proc = GatewayProcess(
        env=standin.env(**ENV), state_dir=tmp_path_factory.mktemp("faults") / "state"
    ).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def rpc(gateway: GatewayProcess) -> Iterator[Rpc]:
    """One MCP session on one keep-alive connection for the whole module."""
    with Rpc(gateway.mcp_url, timeout=DEADLINE + 20) as session:
        yield session


#: name → (fault set-up, expected error reason or None for success, a retry is expected)
READ_FAULTS: dict[str, tuple[Callable[[StandinControl], Any], str | None, bool]] = {
    "slow": (lambda c: c.delay(0.5), None, False),
    "slower than the timeout, every time": (
        lambda c: c.delay(TIMEOUT + 2, count=None),
        "upstream_error",
        True,
    ),
    "reset once": (lambda c: c.reset_connection(), None, True),
    "reset every time": (lambda c: c.reset_connection(count=None), "upstream_error", True),
    "dropped once": (lambda c: c.drop(), None, True),
    "429 with Retry-After, once": (lambda c: c.rate_limit(1), None, True),
    "429 without Retry-After": (lambda c: c.rate_limit(None), "rate_limited", False),
    "429 every time": (lambda c: c.rate_limit(1, count=None), "rate_limited", True),
    "503 burst of two": (lambda c: c.fail(503, count=2), None, True),
    "502 every time": (lambda c: c.fail(502, count=None), "upstream_error", True),
    "malformed JSON": (
        lambda c: c.fail(200, body='{"data": {"proj', content_type="application/json", count=None),
        "upstream_error",
        False,
    ),
    "HTML sign-in page": (lambda c: c.html_page(count=None), "upstream_error", False),
}


def run(rpc: Rpc, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    result = rpc.call(tool, arguments)
    elapsed = time.monotonic() - started
    ELAPSED.append(elapsed)
    return result, elapsed


def check_clear(result: dict[str, Any]) -> None:
    """An error result says what happened in words, and names the request id."""
    if result.get("isError"):
        error = structured(result)["error"]
        assert len(error["message"]) > 20 and "Traceback" not in error["message"]
        assert error.get("request_id")


@pytest.mark.parametrize("name", list(READ_FAULTS))
def test_a_read_under_a_fault_gets_a_clear_result_in_time(
    name: str, gateway: GatewayProcess, rpc: Rpc, fresh_standin: Standin
) -> None:
    setup, expected, retried = READ_FAULTS[name]
    before = metric_samples(gateway.url)
    setup(fresh_standin.control)
    result, elapsed = run(rpc, *READ)
    fresh_standin.control.clear_faults()
    assert error_reason(result) == expected, structured(result)
    check_clear(result)
    assert elapsed <= CALL_DEADLINE + GRACE, f"{name}: {elapsed:.1f}s"
    if expected == "rate_limited":
        assert structured(result)["error"]["retry_after_seconds"] >= 1
    after = metric_samples(gateway.url)
    outcome = expected or "ok"
    calls = metric(after, "gateway_tool_calls_total", tool="get_pipeline", outcome=outcome)
    assert calls - metric(before, "gateway_tool_calls_total", tool="get_pipeline", outcome=outcome) == 1
    retries = metric(after, "gateway_gitlab_retries_total") - metric(before, "gateway_gitlab_retries_total")
    assert (retries > 0) == retried, f"{name}: {retries} retries"
    assert rpc.ping(), "the same session and connection must still work"


@pytest.mark.parametrize(
    "message, partial",
    [
        ("Internal server error", False),
        ("Request timed out", False),
        ("Internal server error", True),
    ],
)
def test_gitlabs_own_graphql_failures_are_upstream_errors_retried_for_reads(
    message: str, partial: bool, rpc: Rpc, fresh_standin: Standin
) -> None:
    control = fresh_standin.control
    if partial:
        control.graphql_partial(message, count=None)
    else:
        control.add_fault("graphql_error", body=message, count=None)
    result, elapsed = run(rpc, *READ)
    control.clear_faults()
    assert elapsed <= CALL_DEADLINE + GRACE
    assert error_reason(result) == "upstream_error", structured(result)
    assert control.graphql_requests() > 1, "a read failing inside GitLab is retried"


def test_a_trickled_body_does_not_outlive_the_deadline(
    fresh_standin: Standin, start_gateway: Callable[..., GatewayProcess]
) -> None:
    gateway = start_gateway(env=fresh_standin.env(**ENV))
    fresh_standin.control.trickle(0.5, chunk=1, count=None)
    limit = CALL_DEADLINE + GRACE
    with Rpc(gateway.mcp_url, timeout=limit + 2) as session:
        try:
            result, elapsed = run(session, *READ)
        except httpx.TimeoutException:
            pytest.fail(f"no answer within {limit + 2:.0f}s")
        finally:
            fresh_standin.control.clear_faults()
    assert elapsed <= limit
    assert error_reason(result) == "upstream_error"


MUTATION_FAULTS: dict[str, Callable[[StandinControl], Any]] = {
    "dropped after it was applied": lambda c: c.drop(match=MUTATION, phase="after"),
    "reset after it was applied": lambda c: c.reset_connection(match=MUTATION, phase="after"),
    "answered after the timeout": lambda c: c.delay(TIMEOUT + 2, match=MUTATION, phase="after"),
    "GraphQL errors beside the applied data": lambda c: c.graphql_partial(match=MUTATION),
    "503 before it was applied": lambda c: c.fail(503, match=MUTATION),
    "reset before it was applied": lambda c: c.reset_connection(match=MUTATION),
}


@pytest.mark.parametrize("name", list(MUTATION_FAULTS))
def test_a_mutation_is_never_applied_twice(
    name: str, gateway: GatewayProcess, rpc: Rpc, fresh_standin: Standin
) -> None:
    control = fresh_standin.control
    before = metric_samples(gateway.url)
    MUTATION_FAULTS[name](control)
    result, elapsed = run(rpc, *CREATE)
    control.clear_faults()
    assert elapsed <= CALL_DEADLINE + GRACE
    assert control.graphql_requests(field="pipelineCreate") == 1, "the mutation was sent again"
    assert len(control.pipelines(created=True)) <= 1
    assert error_reason(result) == "upstream_error", structured(result)
    check_clear(result)
    message = structured(result)["error"]["message"]
    assert "did not send it again" in message or "may" in message
    after = metric_samples(gateway.url)
    key = {"tool": "save_pipeline", "outcome": "upstream_error"}
    assert (
        metric(after, "gateway_tool_calls_total", **key) - metric(before, "gateway_tool_calls_total", **key)
        == 1
    )
    assert rpc.ping()


def test_the_gateway_is_still_healthy_after_every_fault(gateway: GatewayProcess, rpc: Rpc) -> None:
    assert httpx.get(f"{gateway.url}/healthz", timeout=5).status_code == 200
    assert rpc.ping()
    assert gateway.proc is not None and gateway.proc.poll() is None
    assert "Traceback" not in gateway.log()
