"""The deployment files are valid and agree with the gateway.

- Kubernetes manifests against Kubernetes' own OpenAPI schemas (``kubernetes-validate``, offline,
  strict: unknown fields fail), plus the sidecar's promises (loopback MCP port, probes, Secret,
  volume, resources).
- The ServiceMonitor and ``deploy/prometheus/prometheus.yml`` point at the same port and path;
  ``promtool check config`` accepts both Prometheus files.
- The Grafana dashboard only queries metric names that ``Metrics`` exposes.
- The compose file and its example environment make a valid configuration.
- The Dockerfile passes hadolint and keeps its promises (multi-stage, non-root, HEALTHCHECK...).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from gateway.config import Settings, load_settings
from gateway.observability.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
#: The oldest Kubernetes with native sidecars on by default (restartPolicy: Always, 1.29 beta).
K8S_VERSION = "1.29"
IN_CI = bool(os.environ.get("CI"))


def _tool(name: str) -> str:
    """A command from PATH or the virtual environment; skipped locally when absent, failed in CI."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        if IN_CI:
            pytest.fail(f"{name} is not installed (scripts/test installs it)")
        pytest.skip(f"{name} is not installed")
    return found


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


#: The single-pod variant's manifests and the ServiceMonitor both variants share.
MANIFESTS = sorted([*K8S.glob("*.yaml"), *K8S.glob("monitoring/*.yaml")])


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for p in MANIFESTS for d in _documents(p) if d["kind"] == kind]


def _sidecar() -> dict[str, Any]:
    (deployment,) = _by_kind("Deployment")
    gateway: dict[str, Any]
    (gateway,) = [
        c
        for c in deployment["spec"]["template"]["spec"]["initContainers"]
        if c["name"] == "gitlab-mcp-gateway"
    ]
    return gateway


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# -- Kubernetes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_kubernetes_manifests_match_the_schema(path: Path) -> None:
    for document in _documents(path):
        if document["kind"] in ("Kustomization", "ServiceMonitor"):  # not core kinds: checked below
            continue
        try:
            kubernetes_validate.validate(document, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            where = ".".join(str(p) for p in err.path)
            pytest.fail(
                f"{path.name}: {document['kind']}/{document['metadata']['name']}: {where}: {err.message}"
            )


def test_the_schema_check_is_real() -> None:
    (deployment,) = _by_kind("Deployment")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["initContainers"][0]["livenessProbe"]["httpGet"]["paht"] = "/healthz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


@pytest.mark.parametrize("root", [K8S, K8S / "replicas", K8S / "monitoring"], ids=lambda p: p.name)
def test_kustomization_lists_existing_files(root: Path) -> None:
    (kustomization,) = _documents(root / "kustomization.yaml")
    for resource in kustomization["resources"]:
        path = (root / resource).resolve()
        # A file below the root, or a folder with a kustomization of its own (kustomize loads no
        # file from outside its root).
        assert (path.is_file() and root in path.parents) or (path / "kustomization.yaml").is_file(), resource


def test_both_variants_are_scraped_by_the_operator() -> None:
    for root in (K8S, K8S / "replicas"):
        (kustomization,) = _documents(root / "kustomization.yaml")
        assert any((root / r).resolve() == K8S / "monitoring" for r in kustomization["resources"]), root
    (monitor,) = _by_kind("ServiceMonitor")
    (service,) = [s for s in _documents(REPLICAS / "agents.yaml") if s["kind"] == "Service"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in [p["name"] for p in service["spec"]["ports"]]


def test_the_sidecar_keeps_mcp_on_loopback_and_exposes_only_metrics() -> None:
    gateway = _sidecar()
    assert gateway["restartPolicy"] == "Always"  # a native sidecar: up before the agent, down after it
    args = gateway["args"]
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == "8080"
    env = _env(gateway)
    (metrics_port,) = gateway["ports"]
    assert metrics_port == {
        "name": "metrics",
        "containerPort": int(env["GATEWAY_SERVER__METRICS_PORT"]),
        "protocol": "TCP",
    }
    assert env["GATEWAY_LOGGING__FORMAT"] == "json"

    # The settings the sidecar runs with are valid (not refused for a non-loopback MCP port).
    overrides: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 8080, "metrics_port": 9090, "metrics_host": "0.0.0.0"}
    }
    settings = load_settings(gitlab={"token": "glpat-from-the-secret"}, **overrides)
    assert settings.server.metrics_port == 9090


def test_the_sidecar_probes_token_state_and_resources() -> None:
    gateway = _sidecar()
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert gateway["startupProbe"]["httpGet"]["path"] == "/healthz"

    env = _env(gateway)
    assert env["GITLAB_TOKEN"] == {"secretKeyRef": {"name": "gitlab-mcp-gateway", "key": "GITLAB_TOKEN"}}
    (secret,) = _by_kind("Secret")
    assert secret["metadata"]["name"] == "gitlab-mcp-gateway" and "GITLAB_TOKEN" in secret["stringData"]

    mounts = {m["name"]: m["mountPath"] for m in gateway["volumeMounts"]}
    assert mounts["state"] == env["GATEWAY_STATE_DIR"] == "/var/lib/gitlab-mcp-gateway"
    (deployment,) = _by_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (claim,) = _by_kind("PersistentVolumeClaim")
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert deployment["spec"]["strategy"]["type"] == "Recreate"  # one SQLite writer at a time

    assert {"cpu", "memory"} <= set(gateway["resources"]["requests"])
    assert "memory" in gateway["resources"]["limits"]
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["terminationGracePeriodSeconds"] > Settings().server.shutdown_timeout_seconds

    (agent,) = pod["containers"]
    assert _env(agent)["MCP_SERVER_URL"] == "http://127.0.0.1:8080/mcp"


def test_service_monitor_selects_the_metrics_service() -> None:
    (monitor,) = _by_kind("ServiceMonitor")
    (service,) = _by_kind("Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = monitor["spec"]["selector"]["matchLabels"]
    assert labels.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["metrics"] == 9090
    (deployment,) = _by_kind("Deployment")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


# -- Prometheus ---------------------------------------------------------------------------------


def test_scrape_configuration_matches_the_service_monitor() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    (monitor,) = _by_kind("ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert job["job_name"] == monitor["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    assert job["metrics_path"] == endpoint["path"]
    assert job["scrape_interval"] == endpoint["interval"]
    (service,) = _by_kind("Service")
    (dns,) = job["dns_sd_configs"]
    assert dns["names"][0].startswith(service["metadata"]["name"] + ".")
    assert service["spec"]["clusterIP"] == "None"  # headless: one A record per pod
    assert dns["port"] == 9090


ALERTS = DEPLOY / "prometheus" / "alerts.yml"


@pytest.mark.parametrize(
    "path", [DEPLOY / "prometheus" / "prometheus.yml", DEPLOY / "compose" / "prometheus.yml"], ids=str
)
@pytest.mark.spawns_process(reason="runs Prometheus's promtool on the file")
def test_promtool_accepts_the_scrape_configuration(path: Path, tmp_path: Path) -> None:
    promtool = _tool("promtool")
    # As Prometheus sees it: the alerting rules beside the configuration (compose.yaml mounts them).
    config = yaml.safe_load(path.read_text())
    assert config["rule_files"] == ["alerts.yml"]
    shutil.copy(path, tmp_path / "prometheus.yml")
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    result = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


def test_compose_mounts_the_alerting_rules_beside_its_configuration() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "../prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts


@pytest.mark.spawns_process(reason="runs promtool check rules and promtool test rules")
def test_promtool_checks_and_tests_the_alerting_rules() -> None:
    promtool = _tool("promtool")
    check = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests = ALERTS.with_name("alerts_test.yml")
    result = subprocess.run(
        [promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Every rule has a test in which it fires, and one in which it stays quiet.
    rules = {r["alert"]: r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    cases = [c for t in yaml.safe_load(tests.read_text())["tests"] for c in t["alert_rule_test"]]
    assert {c["alertname"] for c in cases if c["exp_alerts"]} == set(rules)
    assert {c["alertname"] for c in cases if not c["exp_alerts"]} == set(rules)
    for name, rule in rules.items():
        # What the on-call reads: a summary, and a description that says what to check or do.
        assert {"summary", "description"} <= rule["annotations"].keys(), name
        assert rule["labels"]["severity"] in ("critical", "warning"), name


def _minutes(text: str) -> float:
    """``7m``, ``6m15s`` → minutes."""
    minutes, _, seconds = text.partition("m")
    return float(minutes) + float(seconds.rstrip("s") or 0) / 60


@pytest.mark.spawns_process(reason="runs promtool test rules")
def test_an_outage_and_a_runaway_agent_raise_their_alerts_within_two_minutes() -> None:
    promtool = _tool("promtool")
    timing = ALERTS.with_name("alerts_timing_test.yml")
    # At the shipped pace: the scrape configuration's interval is the test's.
    spec = yaml.safe_load(timing.read_text())
    shipped = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["global"]
    assert spec["evaluation_interval"] == shipped["evaluation_interval"] == "15s"
    result = subprocess.run(
        [promtool, "test", "rules", str(timing)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    fired = {
        case["alertname"]: _minutes(case["eval_time"])
        for test in spec["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    # Each trouble begins at 5m in the file: each alert is asserted firing by 7m.
    assert fired == {"GitLabMcpGatewayGitLabUnreachable": 7.0, "GitLabMcpGatewayAgentCallRateHigh": 7.0}


def _shipped_gateways() -> dict[str, dict[str, Any]]:
    """Every gateway the deploy/ files run: its environment, by where it is."""
    out: dict[str, dict[str, Any]] = {}
    for path in [*MANIFESTS, *REPLICAS.glob("*.yaml")]:
        for doc in _documents(path):
            if doc["kind"] != "Deployment":
                continue
            spec = doc["spec"]["template"]["spec"]
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                if c["name"] == "gitlab-mcp-gateway":
                    out[f"{path.name}:{doc['metadata']['name']}"] = _env(c)
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    for name, service in compose["services"].items():
        if name.startswith("gateway"):
            out[f"compose:{name}"] = service["environment"]
    return out


def test_every_shipped_gateway_holds_a_runaway_agent_to_the_pace_the_alert_names() -> None:
    gateways = _shipped_gateways()
    assert len(gateways) == 6  # the sidecar, three replicas' sidecars, compose's two gateways
    for where, env in gateways.items():
        limits = {k: v for k, v in env.items() if k.startswith("GATEWAY_LIMITS__")}
        assert limits == {"GATEWAY_LIMITS__CALLS_PER_SECOND": "5", "GATEWAY_LIMITS__BURST": "30"}, where
    settings = load_settings(
        gitlab={"url": "https://gitlab.example.com"}, limits={"calls_per_second": 5, "burst": 30}
    )
    assert (settings.limits.calls_per_second, settings.limits.burst) == (5.0, 30)
    # The runaway alert counts the calls an agent makes, refused or not: above the limit's pace.
    (rule,) = [
        r
        for g in yaml.safe_load(ALERTS.read_text())["groups"]
        for r in g["rules"]
        if r.get("alert") == "GitLabMcpGatewayAgentCallRateHigh"
    ]
    assert rule["expr"].endswith('(rate(gateway_tool_calls_total{toolset!="broker"}[1m])) > 5')


def test_alerting_rules_only_query_existing_metrics() -> None:
    exprs = [r["expr"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    used = {name for expr in exprs for name in re.findall(r"\bgateway_[a-z0-9_]+", expr)}
    assert used and used - _exposed_series() == set()


def test_the_human_needed_alert_says_how_a_person_answers() -> None:
    rules = {r["alert"]: r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    text = rules["GitLabMcpGatewayBrokerHumanNeeded"]["annotations"]["description"]
    # The console is at /broker; a person answers there or with the CLI, not with agents' tools.
    assert "/broker" in text and "/console" not in text
    assert '"Send to the PM"' in text and "broker instruct" in text
    assert "resume (or stop_pipeline)" not in text


# -- Grafana ------------------------------------------------------------------------------------


def _exposed_series() -> set[str]:
    metrics = Metrics()
    metrics.tool_latency.labels("t").observe(1)  # labelled families expose samples once used
    metrics.gitlab_latency.labels("o").observe(1)
    names = set()
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    for attribute in vars(metrics).values():  # counters and gauges with labels not yet used
        name = getattr(attribute, "_name", None)
        kind = getattr(attribute, "_type", None)
        if name:
            names.add(name + ("_total" if kind == "counter" else "_info" if kind == "info" else ""))
    return names


def test_grafana_dashboard_only_queries_existing_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "gitlab-mcp-gateway.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    assert len(exprs) > 15
    used = {name for expr in exprs for name in re.findall(r"\b(?:gateway|process)_[a-z0-9_]+", expr)}
    exposed = _exposed_series()
    assert used - exposed == set()
    # Every metric family of the issue has a panel.
    for family in (
        "gateway_mcp_requests_total",
        "gateway_tool_calls_total",
        "gateway_tool_call_duration_seconds_bucket",
        "gateway_gitlab_requests_total",
        "gateway_gitlab_request_duration_seconds_bucket",
        "gateway_gitlab_retries_total",
        "gateway_gitlab_rate_limit_wait_seconds_total",
        "gateway_cache_hits_total",
        "gateway_cache_misses_total",
        "gateway_cache_evictions_total",
        "gateway_mcp_sessions_issued_total",
        "gateway_mcp_sse_streams_open",
        "gateway_broker_state",
        "gateway_broker_queue_depth",
        "gateway_broker_waits_open",
        "gateway_build_info",
        "gateway_gitlab_rate_limited_total",
        "gateway_broker_state_since_timestamp_seconds",
        "gateway_broker_agent_last_seen_timestamp_seconds",
        "gateway_broker_agent_waiting",
        "gateway_broker_database_up",
        "gateway_rate_limited_total",
        "gateway_gitlab_reachable",
        "gateway_ready",
    ):
        assert family in used, family


def test_grafana_dashboard_opens_on_health_then_who_is_using_it() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "gitlab-mcp-gateway.json").read_text())
    rows: dict[str, list[dict[str, Any]]] = {}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            current = rows.setdefault(panel["title"], [])
        else:
            current.append(panel)
    assert list(rows)[:2] == ["Health", "Who is using it"]
    health = {p["title"]: p["targets"][0]["expr"] for p in rows["Health"]}
    assert list(health) == ["Up", "Ready", "GitLab reachable", "Broker database"]
    assert [re.search(r"\(([a-z_]+)\{", e).group(1) for e in health.values()] == [  # type: ignore[union-attr]
        "up",
        "gateway_ready",
        "gateway_gitlab_reachable",
        "gateway_broker_database_up",
    ]
    who = [t["expr"] for p in rows["Who is using it"] for t in p["targets"]]
    assert any(e.startswith("sum by (agent) (rate(gateway_tool_calls_total") for e in who)


def test_grafana_dashboard_shape() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "gitlab-mcp-gateway.json").read_text())
    assert dashboard["uid"] == "gitlab-mcp-gateway"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert target["expr"].count("(") == target["expr"].count(")")
            # Every replica reports the broker's database: a sum would count it once per replica.
            assert not re.search(
                r"sum(\s+by\s*\([^)]*\))?\s*\(\s*gateway_broker_(state|queue_depth|agent_last_seen)",
                target["expr"],
            )
    # Panels do not overlap on Grafana's 24-column grid.
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {
            (x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not mine & cells, panel["title"]
        cells |= mine


def test_grafana_panels_do_not_mix_units_on_one_axis() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "gitlab-mcp-gateway.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"] == "Cache size"]
    units = {}
    for target in panel["targets"]:
        unit = panel["fieldConfig"]["defaults"]["unit"]
        placement = "left"
        for override in panel["fieldConfig"]["overrides"]:
            if override["matcher"] == {"id": "byFrameRefID", "options": target["refId"]}:
                props = {p["id"]: p["value"] for p in override["properties"]}
                unit = props.get("unit", unit)
                placement = props.get("custom.axisPlacement", placement)
        units[re.findall(r"gateway_cache_\w+", target["expr"])[0]] = (unit, placement)
    assert units == {
        "gateway_cache_size_bytes": ("bytes", "left"),
        "gateway_cache_entries": ("short", "right"),
    }


def test_grafana_state_panel_shows_the_current_state_only() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "gitlab-mcp-gateway.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"] == "Pipeline state"]
    # A range query keeps every state that was 1 at some point of the range (tests/e2e/test_prometheus.py
    # asks a real Prometheus); an instant query has the current one only.
    assert [(t["instant"], t["range"]) for t in panel["targets"]] == [(True, False)]


# -- compose ------------------------------------------------------------------------------------


def test_compose_runs_the_gateway_with_client_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    gateway = compose["services"]["gateway"]
    assert (REPO / "Dockerfile").is_file() and (
        DEPLOY / "compose" / gateway["build"]["context"]
    ).resolve() == REPO
    assert all(port.startswith("127.0.0.1:") for port in gateway["ports"])  # the laptop only
    state = gateway["environment"]["GATEWAY_STATE_DIR"]
    assert f"gateway-state:{state}" in gateway["volumes"] and "gateway-state" in compose["volumes"]
    assert {s for s, v in compose["services"].items() if "profiles" not in v} == {"gateway"}

    # The example environment, its placeholders replaced by secrets as its comments say, plus the
    # compose settings make a configuration the gateway accepts, even though it binds 0.0.0.0 with
    # a service token: the client tokens make that safe. Left as they are, the placeholders are refused.
    example = DEPLOY / "compose" / "gateway.env.example"
    for line in example.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            monkeypatch.setenv(name, value)
    for name, value in gateway["environment"].items():
        monkeypatch.setenv(name, str(value))
    command = gateway["command"]
    host = {"host": command[command.index("--host") + 1]}
    with pytest.raises(ValidationError) as refused:
        load_settings(server=host)
    assert re.search(r"gitlab\.token\n.*is still the example's placeholder", str(refused.value))
    assert re.search(r"client_tokens\.0\.token\n.*is still the example's placeholder", str(refused.value))
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-" + "x" * 20)
    filled = re.sub(
        r"REPLACE-WITH-A-RANDOM-SECRET-FOR-(\w+)",
        lambda m: f"{m[1]}-{'7f' * 16}",
        os.environ["GATEWAY_CLIENT_TOKENS"],
    )
    monkeypatch.setenv("GATEWAY_CLIENT_TOKENS", filled)
    settings = load_settings(server=host)
    assert settings.server.host == "0.0.0.0"
    assert [c.agent_id for c in settings.client_tokens] == ["pm", "dev", "reviewer"]
    assert settings.server.metrics_port == 9090


# -- Dockerfile ---------------------------------------------------------------------------------


@pytest.mark.spawns_process(reason="runs hadolint on the Dockerfile")
def test_hadolint_accepts_the_dockerfile() -> None:
    hadolint = _tool("hadolint")
    result = subprocess.run([hadolint, "Dockerfile"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_promises() -> None:
    text = (REPO / "Dockerfile").read_text()
    instructions = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    stages = [i for i, line in enumerate(instructions) if line.startswith("FROM ")]
    assert len(stages) == 2  # multi-stage
    final = "\n".join(instructions[stages[-1] :])
    assert "-slim" in text
    assert re.search(r"^USER 10001", final, re.M)  # not root
    assert "HEALTHCHECK " in final
    assert re.search(r'HEALTHCHECK [^\n]*\\\n\s+CMD \["python", "-m", "gateway.observability.probe"\]', text)
    assert 'VOLUME ["/var/lib/gitlab-mcp-gateway"]' in final
    assert "GATEWAY_STATE_DIR=/var/lib/gitlab-mcp-gateway" in text
    assert "EXPOSE 8080" in final
    assert not re.search(r"apt-get|gcc|build-essential|pip install", final)  # nothing built there
    # An ARG without a default makes podman (buildah) warn "missing ... build argument" on every
    # build that does not pass it.
    assert [line for line in instructions if re.fullmatch(r"ARG \w+", line)] == []
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*") :][:6] == [
        "*",
        "!pyproject.toml",
        "!setup.py",
        "!README.md",
        "!MANIFEST.in",
        "!gateway/",
    ]


# -- replicas on PostgreSQL ---------------------------------------------------------------------

REPLICAS = K8S / "replicas"


@pytest.mark.parametrize("path", sorted(REPLICAS.glob("*.yaml")), ids=lambda p: p.name)
def test_replicas_manifests_match_the_schema(path: Path) -> None:
    for document in _documents(path):
        if document["kind"] != "Kustomization":
            kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def test_replicas_variant_runs_each_agent_with_its_sidecar_on_one_database() -> None:
    kustomization = _documents(REPLICAS / "kustomization.yaml")[0]
    assert sorted(kustomization["resources"]) == sorted(
        [
            *(
                p.name
                for p in REPLICAS.glob("*.yaml")
                if p.name not in ("kustomization.yaml", "secret.example.yaml")
            ),
            "../monitoring",
        ]
    )
    deployments = [d for d in _documents(REPLICAS / "agents.yaml") if d["kind"] == "Deployment"]
    agents = []
    for deployment in deployments:
        spec = deployment["spec"]["template"]["spec"]
        (sidecar,) = spec["initContainers"]
        env = {e["name"]: e for e in sidecar["env"]}
        # The DSN (with its password) only ever comes from a Secret.
        assert env["GATEWAY_BROKER__DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "gitlab-mcp-gateway-broker",
            "key": "DATABASE_URL",
        }
        assert sidecar["args"] == ["--host", "127.0.0.1", "--port", "8080"]  # /mcp stays in the pod
        assert not any("persistentVolumeClaim" in v for v in spec["volumes"])
        (agent,) = spec["containers"]
        agents.append({e["name"]: e.get("value") for e in agent["env"]}["MCP_AGENT_ID"])
    assert agents == ["pm", "dev", "reviewer"]
    (statefulset,) = [d for d in _documents(REPLICAS / "postgres.yaml") if d["kind"] == "StatefulSet"]
    secret = _documents(REPLICAS / "secret.example.yaml")[0]
    assert secret["stringData"]["DATABASE_URL"].startswith("postgresql://")
    pg_env = {e["name"]: e for e in statefulset["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "valueFrom" in pg_env["POSTGRES_PASSWORD"]


def test_compose_prometheus_scrapes_every_gateway() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    scrape = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())["scrape_configs"]
    targets = {
        target.rsplit(":", 1)[0]: job["job_name"]
        for job in scrape
        for target in [
            *(t for c in job.get("static_configs", []) for t in c["targets"]),
            *(f"{n}:{c['port']}" for c in job.get("dns_sd_configs", []) for n in c["names"]),
        ]
    }
    gateways = [name for name, service in compose["services"].items() if name.startswith("gateway")]
    assert sorted(gateways) == ["gateway", "gateway-postgres"]
    for name in gateways:
        # Each serves /metrics on 9090 inside the network, and Prometheus asks it there.
        assert compose["services"][name]["environment"]["GATEWAY_SERVER__METRICS_PORT"] == "9090"
        assert name in targets, name
    # Two brokers are two deployments: one job each, so alerts grouped by job do not mix them.
    assert targets["gateway"] != targets["gateway-postgres"]
    assert all(job.startswith("gitlab-mcp-gateway") for job in targets.values())


def test_compose_postgres_profile_points_a_gateway_at_the_database() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    services = compose["services"]
    assert services["postgres"]["profiles"] == ["postgres"]
    gateway = services["gateway-postgres"]
    assert gateway["profiles"] == ["postgres"]
    url = gateway["environment"]["GATEWAY_BROKER__DATABASE_URL"]
    settings = load_settings(broker={"database_url": url})
    assert settings.broker.database_url is not None
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert all(port.startswith("127.0.0.1:") for port in gateway["ports"])
