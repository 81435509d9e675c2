"""The container image: the project's ``Dockerfile`` built with podman, run, probed and stopped.

The base image is made from Debian's packages (``tests/container/base_image.py``: no container
registry is reachable here), usually while ``scripts/test`` installs the Python packages. The
``Dockerfile`` is built on it with ``--build-arg PYTHON_IMAGE=...`` (``--format docker``: the
OCI format drops ``HEALTHCHECK``), and the container runs with a published loopback port.

Checked as an operator would:

- with a published port (``--host 0.0.0.0``, the documented ``docker run -p``): ``/healthz``, one
  MCP ``tools/call`` with the official SDK client (a broker tool, authenticated with a client
  token), the image's own health check (``podman healthcheck run``), and ``podman stop``: SIGTERM,
  exit status 0, "stopped" in the log;
- on the host's network, pointed at the repository's GitLab stand-in: the start-up line says
  GitLab is reachable and the token accepted, and every GitLab tool answers one successful call
  (``tests/e2e/every_tool.py``), so the GraphQL documents and everything else ``pip install .``
  must carry are in the image.

Podman is configured for this test alone under ``.tools/podman/`` (``base_image.podman_env``). pip
inside the build reaches PyPI through the host's TLS setup, so the host's CA bundle is mounted
read-only for the build and named in ``PIP_CERT``. Outside CI the test is skipped, saying why,
when podman or mmdebstrap is missing; in CI (``CI`` set) it must run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.container import base_image
from tests.e2e.every_tool import HAPPY
from tests.e2e.harness import free_port, mcp_client
from tests.local_http import TLS
from tests.standin.fixtures import Standin, standin  # noqa: F401  (a fixture of this module)

pytestmark = pytest.mark.slow

#: The host's CA bundle (Debian's path): mounted for pip during the build when present.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CLIENT_TOKEN = "container-test-pm-" + "x" * 24


def _need(command: str) -> str:
    found = shutil.which(command)
    if found is None:
        reason = f"{command} is not installed (scripts/install-test-tools installs it as root)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def _run(
    *args: str, timeout: float, env: dict[str, str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    try:
        return base_image.run(*args, timeout=timeout, env=env, check=check)
    except base_image.CommandFailed as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def podman() -> dict[str, str]:
    for command in base_image.COMMANDS:
        _need(command)
    return base_image.podman_env()


@pytest.fixture(scope="module")
def image(podman: dict[str, str]) -> Iterator[str]:
    try:
        base = base_image.base_image(podman)
    except base_image.CommandFailed as exc:
        pytest.fail(str(exc))
    name = f"localhost/gitlab-mcp-gateway:test-{uuid.uuid4().hex[:8]}"
    args = ["podman", "build", "--pull=never", "--format", "docker", "--network", "host"]
    args += ["--build-arg", f"PYTHON_IMAGE={base}", "--tag", name]
    if HOST_CA_BUNDLE.is_file():
        args += [
            "--volume",
            f"{HOST_CA_BUNDLE}:/run/host-ca.crt:ro",
            "--build-arg",
            "PIP_CERT=/run/host-ca.crt",
        ]
    _run(*args, str(REPO), timeout=420, env=podman)
    yield name
    _run("podman", "rmi", "--force", name, timeout=60, env=podman, check=False)


def _wait_healthy(url: str, timeout: float = 60.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(url, timeout=2.0, verify=TLS)
            if response.status_code == 200:
                return response
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{url} did not answer 200 within {timeout:.0f} s")
        time.sleep(0.3)


async def test_the_image_serves_mcp_passes_its_health_check_and_stops_cleanly(
    podman: dict[str, str], image: str
) -> None:
    port = free_port()
    name = f"gateway-test-{uuid.uuid4().hex[:8]}"
    tokens = json.dumps([{"token": CLIENT_TOKEN, "agent_id": "pm"}])
    run = ["podman", "run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8080"]
    run += ["--env", "GITLAB_URL=http://127.0.0.1:9", "--env", f"GATEWAY_CLIENT_TOKENS={tokens}"]
    _run(*run, image, "--host", "0.0.0.0", timeout=120, env=podman)
    try:
        health = _wait_healthy(f"http://127.0.0.1:{port}/healthz")
        assert health.json() == {"status": "ok"}

        headers = {"Authorization": f"Bearer {CLIENT_TOKEN}"}
        async with mcp_client(f"http://127.0.0.1:{port}/mcp", headers=headers) as client:
            result = await client.call_tool("get_pipeline_status", {})
        assert not result.is_error, result.content
        assert result.structured_content["state"] == "IDLE"

        check = _run("podman", "healthcheck", "run", name, timeout=60, env=podman, check=False)
        assert check.returncode == 0, f"the image's HEALTHCHECK failed: {check.stdout}{check.stderr}"

        _run("podman", "stop", "--time", "30", name, timeout=60, env=podman)
        state = _run("podman", "inspect", "--format", "{{.State.ExitCode}}", name, timeout=60, env=podman)
        logs = _run("podman", "logs", name, timeout=60, env=podman)
        assert state.stdout.strip() == "0", logs.stdout + logs.stderr
        lines = (logs.stdout + logs.stderr).splitlines()  # the gateway logs JSON to stderr
        messages = [json.loads(line)["message"] for line in lines if line.startswith("{")]
        assert "stopped" in messages, messages
    finally:
        _run("podman", "rm", "--force", name, timeout=60, env=podman, check=False)


def _log_messages(podman: dict[str, str], name: str) -> list[str]:
    logs = _run("podman", "logs", name, timeout=60, env=podman)
    lines = (logs.stdout + logs.stderr).splitlines()  # the gateway logs JSON to stderr
    return [json.loads(line)["message"] for line in lines if line.startswith("{")]


async def test_the_image_answers_every_gitlab_tool_from_the_standin(
    podman: dict[str, str],
    image: str,
    standin: Standin,  # noqa: F811  (the fixture)
) -> None:
    port = free_port()
    name = f"gateway-test-{uuid.uuid4().hex[:8]}"
    tokens = json.dumps([{"token": CLIENT_TOKEN, "agent_id": "pm"}])
    # The host's network: the stand-in listens on the host's loopback. The port is set through
    # the environment, as the Dockerfile asks, so the image's HEALTHCHECK follows it.
    run = ["podman", "run", "--detach", "--name", name, "--network", "host"]
    run += ["--env", f"GATEWAY_SERVER__PORT={port}", "--env", f"GATEWAY_CLIENT_TOKENS={tokens}"]
    run += ["--env", f"GITLAB_URL={standin.url}", "--env", f"GITLAB_TOKEN={standin.tokens.alice}"]
    run += ["--env", "GATEWAY_TOOLSETS=all"]  # every tool is called below, the superseded ones too
    _run(*run, image, timeout=120, env=podman)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/healthz")
        deadline = time.monotonic() + 30
        checked = [m for m in _log_messages(podman, name) if f"at {standin.url}:" in m]
        while not checked and time.monotonic() < deadline:
            time.sleep(0.3)
            checked = [m for m in _log_messages(podman, name) if f"at {standin.url}:" in m]
        assert checked, f"no start-up check line within 30 s: {_log_messages(podman, name)}"
        assert "reachable, token accepted (user alice)" in checked[0], checked

        headers = {"Authorization": f"Bearer {CLIENT_TOKEN}"}
        async with mcp_client(f"http://127.0.0.1:{port}/mcp", headers=headers) as client:
            answers = {}
            for tool, arguments in HAPPY.items():
                result = await client.call_tool(tool, arguments)
                assert not result.is_error, (tool, result.content)
                assert result.structured_content, tool
                answers[tool] = result.structured_content
            status = await client.call_tool("get_pipeline_status", {})
        assert not status.is_error, status.content
        assert answers["get_pipeline"]["jobs"], "get_pipeline with include=[jobs] answered no jobs"
    finally:
        _run("podman", "rm", "--force", name, timeout=60, env=podman, check=False)
