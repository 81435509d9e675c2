"""The container's health probe (``python -m gateway.observability.probe``), against a real server."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.observability.probe import default_url, probe


async def _server(status: int) -> TestServer:
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"}, status=status)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


async def test_healthy_and_unhealthy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy must not be used
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    ok_server, failing = await _server(200), await _server(503)
    try:
        assert await asyncio.to_thread(probe, str(ok_server.make_url("/healthz"))) == (True, "200")
        bad_url = str(failing.make_url("/healthz"))
        assert await asyncio.to_thread(probe, bad_url) == (False, f"{bad_url} answered 503")
    finally:
        await ok_server.close()
        await failing.close()


async def test_readyz_reason_is_shown() -> None:
    async def readyz(request: web.Request) -> web.Response:
        return web.json_response({"status": "not_ready", "reason": "check GITLAB_URL"}, status=503)

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        url = str(server.make_url("/readyz"))
        assert await asyncio.to_thread(probe, url) == (False, f"{url} answered 503: check GITLAB_URL")
    finally:
        await server.close()


@pytest.mark.spawns_process(reason="runs the probe as the container's health check does: its exit status")
def test_exit_status_when_nothing_listens() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway.observability.probe", "http://127.0.0.1:9/healthz", "--timeout", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("unhealthy: http://127.0.0.1:9/healthz did not answer")


def test_default_url_follows_the_port(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_url() == "http://127.0.0.1:8080/healthz"
    monkeypatch.setenv("GATEWAY_SERVER__PORT", "9000")
    assert default_url() == "http://127.0.0.1:9000/healthz"
