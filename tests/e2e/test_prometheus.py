"""A real Prometheus scrapes the running gateway with the repository's scrape configuration.

Prometheus and promtool come from Debian's ``prometheus`` package (``scripts/install-test-tools``).
The job of ``deploy/prometheus/prometheus.yml`` is kept as it is (name, path, scheme, timeouts)
except its service discovery, replaced by a static target: the gateway's metrics listener
(``server.metrics_port``, as in the Kubernetes example) on loopback, scraped every second.
Tool calls (broker tools, and ``get_pipeline`` against the GitLab stand-in) go through the
official MCP SDK client; the counters are read back through Prometheus's HTTP query API. The
alerting rules of ``deploy/prometheus/alerts.yml`` are loaded as the scrape configuration says,
and every query of the Grafana dashboard is evaluated by this Prometheus after real traffic.

Skipped only when Prometheus is not installed and ``CI`` is unset; in CI its absence fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.harness import REPO, GatewayProcess, free_port, mcp_client
from tests.local_http import TLS
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

SCRAPE_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "gitlab-mcp-gateway.json"
JOB = "gitlab-mcp-gateway"


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed: scripts/install-test-tools installs Debian's prometheus")
        pytest.skip(f"{name} is not installed (Debian package prometheus)")
    return path


def derived_config(target: str) -> dict[str, Any]:
    """The repository's scrape configuration aimed at ``target``, scraping every second."""
    config: dict[str, Any] = yaml.safe_load(SCRAPE_CONFIG.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == JOB]
    for discovery in [k for k in job if k.endswith("_sd_configs")]:
        del job[discovery]
    job.pop("relabel_configs", None)  # they read discovery labels only
    job["static_configs"] = [{"targets": [target]}]
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "900ms"
    config["global"] = {**config.get("global", {}), "scrape_interval": "1s", "evaluation_interval": "1s"}
    config["scrape_configs"] = [job]
    # The rule files, named relative to the repository's configuration, from wherever this one is.
    config["rule_files"] = [str(SCRAPE_CONFIG.parent / f) for f in config.get("rule_files", [])]
    return config


class Prometheus:
    """``prometheus`` on a free loopback port with its data under a temporary folder."""

    def __init__(self, binary: str, config: Path, data: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={data}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1, verify=TLS).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready in {timeout}s:\n{self.log.read_text()}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's ``data.result``."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        response.raise_for_status()
        body = response.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def query_range(self, expr: str, seconds: float) -> list[dict[str, Any]]:
        """A range query's ``data.result`` over the last ``seconds``, a point a second (what
        Grafana asks for a panel's target that is not instant)."""
        end = time.time()
        response = httpx.get(
            f"{self.url}/api/v1/query_range",
            params={"query": expr, "start": end - seconds, "end": end, "step": 1},
            timeout=5,
        )
        response.raise_for_status()
        body = response.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (``/api/v1/rules``), with its ``health`` and ``lastError``."""
        response = httpx.get(f"{self.url}/api/v1/rules", timeout=5)
        response.raise_for_status()
        return [r for g in response.json()["data"]["groups"] for r in g["rules"]]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], Prometheus]]:
    """``prometheus(target)`` → a ready :class:`Prometheus` scraping ``target``; stopped at teardown."""
    binary = _binary("prometheus")
    promtool = _binary("promtool")
    started: list[Prometheus] = []

    def start(target: str) -> Prometheus:
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump(derived_config(target), sort_keys=False))
        check = subprocess.run(
            [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60
        )
        assert check.returncode == 0, check.stdout + check.stderr
        server = Prometheus(binary, config, tmp_path / "tsdb", tmp_path / "prometheus.log")
        started.append(server)
        server.wait_ready()
        return server

    yield start
    for server in started:
        server.stop()


def test_promtool_checks_the_repository_scrape_configuration() -> None:
    promtool = _binary("promtool")
    result = subprocess.run(
        [promtool, "check", "config", str(SCRAPE_CONFIG)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


async def _wait_for(
    prom: Prometheus, expr: str, expected: float, timeout: float = 20.0, *, at_least: bool = False
) -> list[dict[str, Any]]:
    """The result of ``expr`` once its first sample is ``expected`` (or more, with ``at_least``)."""
    deadline = time.monotonic() + timeout
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        result = await asyncio.to_thread(prom.query, expr)
        value = float(result[0]["value"][1]) if result else None
        if value is not None and (value >= expected if at_least else value == expected):
            return result
        await asyncio.sleep(0.25)
    raise AssertionError(f"{expr} did not reach {expected} in {timeout}s: {result}")


async def test_prometheus_reads_the_tool_call_counter(
    fresh_standin: Standin,
    start_gateway: Callable[..., GatewayProcess],
    prometheus: Callable[[str], Prometheus],
) -> None:
    metrics_port = free_port()
    gateway = start_gateway(
        env=fresh_standin.env(
            GATEWAY_SERVER__METRICS_PORT=str(metrics_port),
            GATEWAY_SERVER__METRICS_HOST="127.0.0.1",
        )
    )
    metrics_url = f"http://127.0.0.1:{metrics_port}"
    assert f"Serving /metrics, /healthz and /readyz on {metrics_url}" in gateway.log()
    # The metrics listener serves the three read-only endpoints and never MCP.
    assert httpx.get(f"{metrics_url}/healthz").status_code == 200
    assert httpx.get(f"{metrics_url}/readyz").status_code == 200
    assert httpx.post(f"{metrics_url}/mcp", json={}).status_code == 404

    prom = prometheus(f"127.0.0.1:{metrics_port}")
    await _wait_for(prom, f'up{{job="{JOB}"}}', 1)

    async with mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "pm"}) as client:
        for _ in range(3):
            result = await client.call_tool("get_pipeline_status", {})
            assert not result.is_error, result.content
        refused = await client.call_tool("start_phase", {"phase": "one"})  # invalid arguments
        assert refused.is_error
        pipeline = await client.call_tool(
            "get_pipeline", {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID}
        )
        assert not pipeline.is_error, pipeline.content

    (sample,) = await _wait_for(
        prom, f'gateway_tool_calls_total{{job="{JOB}", tool="get_pipeline_status", outcome="ok"}}', 3
    )
    assert sample["metric"]["instance"] == f"127.0.0.1:{metrics_port}"
    (refusal,) = await _wait_for(prom, f'sum(gateway_tool_calls_total{{job="{JOB}", tool="start_phase"}})', 1)
    assert refusal["value"][1] == "1"
    by_outcome = await asyncio.to_thread(
        prom.query, f'sum by (outcome) (gateway_tool_calls_total{{job="{JOB}", tool="start_phase"}})'
    )
    assert [s["metric"]["outcome"] for s in by_outcome] == ["bad_request"]
    # The latency histogram and the build information came along with the same scrapes.
    count = await asyncio.to_thread(
        prom.query, f'gateway_tool_call_duration_seconds_count{{job="{JOB}", tool="get_pipeline_status"}}'
    )
    assert count and float(count[0]["value"][1]) == 3
    build = await asyncio.to_thread(prom.query, f'gateway_build_info{{job="{JOB}"}}')
    assert build and build[0]["metric"]["version"]
    assert build[0]["metric"]["revision"] not in ("", "unknown")  # the wheel was built from the checkout
    # The GitLab requests behind get_pipeline, labelled by GraphQL operation, never by a path.
    await _wait_for(prom, f'sum(gateway_gitlab_requests_total{{job="{JOB}"}})', 1, at_least=True)
    series = await asyncio.to_thread(
        prom.query, f'sum by (operation, status_class) (gateway_gitlab_requests_total{{job="{JOB}"}})'
    )
    assert {s["metric"]["status_class"] for s in series} == {"2xx"}
    assert "get_pipeline" in {s["metric"]["operation"] for s in series}
    assert not any(ds.PROJECT_PATH in s["metric"]["operation"] for s in series)


def _panel_expr(target: dict[str, Any]) -> str:
    """A target's PromQL with Grafana's variables given the values a user would see: every job
    and instance, a one-minute rate window."""
    expr: str = target["expr"].replace("$__rate_interval", "1m")
    expr = re.sub(r"\$\{?(job|instance)\}?", ".*", expr)
    assert "$" not in expr, expr
    return expr


def dashboard_queries() -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` for every target of the Grafana dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], _panel_expr(target))
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def shown_series(prom: Prometheus, title: str, seconds: float) -> list[dict[str, str]]:
    """The series the panel called ``title`` shows with a dashboard range of the last ``seconds``,
    asked as Grafana asks: an instant query for an instant target, else a range query."""
    dashboard = json.loads(DASHBOARD.read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"] == title]
    shown = []
    for target in panel["targets"]:
        expr = _panel_expr(target)
        result = prom.query(expr) if target.get("instant") else prom.query_range(expr, seconds)
        shown += [s["metric"] for s in result]
    return shown


@pytest.mark.slow  # waits on a real Prometheus's scrapes (up to 30 s) after traffic of every kind
async def test_every_dashboard_query_and_alerting_rule_works_after_real_traffic(
    fresh_standin: Standin,
    start_gateway: Callable[..., GatewayProcess],
    prometheus: Callable[[str], Prometheus],
) -> None:
    metrics_port = free_port()
    gateway = start_gateway(
        env=fresh_standin.env(
            GATEWAY_SERVER__METRICS_PORT=str(metrics_port),
            GATEWAY_SERVER__METRICS_HOST="127.0.0.1",
            # Per-agent limits: three GitLab tool calls, then the gateway refuses the next.
            GATEWAY_LIMITS__CALLS_PER_SECOND="0.001",
            GATEWAY_LIMITS__BURST="3",
        )
    )
    prom = prometheus(f"127.0.0.1:{metrics_port}")
    await _wait_for(prom, f'up{{job="{JOB}"}}', 1)

    # Traffic of every kind the panels show: broker calls, a message sent and delivered, a request
    # for a human, a tool error, GitLab requests (one answered 429 first), a file read twice (a
    # cache miss, then a hit), and a JSON-RPC request the transport refuses.
    fresh_standin.control.rate_limit(retry_after=0, count=1)
    async with (
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "pm"}) as pm,
        mcp_client(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as dev,
    ):
        calls: list[tuple[str, dict[str, Any]]] = [
            ("get_pipeline_status", {}),
            ("start_phase", {"phase": "one"}),  # invalid arguments: bad_request
            ("start_phase", {"phase": 1, "issues": ["A"]}),
            ("send_message", {"to": "dev", "subject": "hello", "body": {"text": "hi"}}),
        ]
        for name, args in calls:
            await pm.call_tool(name, args)
        # Prometheus sees the phase being prepared before the broker turns to HUMAN_NEEDED: both
        # states are in the dashboard's range, and the "Pipeline state" panel must show one.
        await _wait_for(prom, 'max(gateway_broker_state{state="PHASE_PREPARING"})', 1)
        delivered = await dev.call_tool("wait_for_message", {"timeout_sec": 5})
        assert not delivered.is_error, delivered.content
        human = await dev.call_tool("request_human", {"reason": "which API?"})
        assert not human.is_error, human.content
        pipeline = await pm.call_tool("get_pipeline", {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID})
        assert not pipeline.is_error, pipeline.content
        readme = {"project_id": ds.PROJECT_PATH, "file_path": ds.FILES["readme"], "ref": "main"}
        for _ in range(2):  # a cache miss, then a hit
            file = await pm.call_tool("get_repository_file", readme)
            assert not file.is_error, file.content
        limited = await pm.call_tool("get_repository_file", readme)  # over pm's limit: the gateway's
        assert limited.is_error and limited.structured_content is not None
        assert limited.structured_content["error"]["reason"] == "rate_limited"
    refused = httpx.post(
        gateway.mcp_url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream", "Mcp-Session-Id": "not-a-session"},
    )
    assert refused.status_code >= 400

    queries = dashboard_queries()
    assert len(queries) > 25
    empty = list(queries)
    deadline = time.monotonic() + 30
    while empty and time.monotonic() < deadline:
        await asyncio.sleep(1)  # a scrape a second: rates need two samples after the traffic
        empty = [(title, expr) for title, expr in empty if not await asyncio.to_thread(prom.query, expr)]
    assert not empty, f"dashboard panels without data: {empty}"
    # The panels show what happened.
    (state,) = await asyncio.to_thread(
        prom.query, 'max by (state) (gateway_broker_state{state="HUMAN_NEEDED"})'
    )
    assert state["value"][1] == "1"
    (limited_by_gitlab,) = await asyncio.to_thread(prom.query, "sum(gateway_gitlab_rate_limited_total)")
    assert limited_by_gitlab["value"][1] == "1"
    # The "Pipeline state" panel shows the state the broker is in now, not every state of the range.
    states = await asyncio.to_thread(shown_series, prom, "Pipeline state", 300)
    assert [s["state"] for s in states] == ["HUMAN_NEEDED"]
    # The gateway's own refusal is told apart from GitLab's answers.
    (gateway_refusal,) = await asyncio.to_thread(
        prom.query, 'sum by (tool, outcome) (gateway_tool_calls_total{source="gateway"})'
    )
    assert gateway_refusal["metric"] == {"tool": "get_repository_file", "outcome": "rate_limited"}
    (by_agent,) = await asyncio.to_thread(prom.query, "sum by (agent) (gateway_rate_limited_total)")
    assert by_agent["metric"] == {"agent": "pm"} and by_agent["value"][1] == "1"

    # Prometheus loaded every alerting rule and evaluates it without error.
    rules = await asyncio.to_thread(prom.rules)
    shipped = yaml.safe_load((REPO / "deploy/prometheus/alerts.yml").read_text())
    assert len(rules) == sum(len(group["rules"]) for group in shipped["groups"])
    deadline = time.monotonic() + 10
    while any(r.get("lastEvaluation", "").startswith("0001") for r in rules) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        rules = await asyncio.to_thread(prom.rules)
    assert [(r["name"], r["health"], r.get("lastError", "")) for r in rules] == [
        (r["name"], "ok", "") for r in rules
    ]
