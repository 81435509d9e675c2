"""The operator socket's own defences: mode 0600 from the start, same-user peers only."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.broker.state_dir import socket_path_too_long
from gateway.config import load_settings
from gateway.server.operator_socket import bind_private_socket, peer_allowed, serve_operator_socket


def test_the_socket_is_the_users_alone_and_replaces_a_stale_one(tmp_path: Path) -> None:
    path = tmp_path / "operator.sock"
    path.write_text("left by a gateway that was killed")
    sock = bind_private_socket(path)
    try:
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == ["operator.sock"]  # no staging folder left
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(path))
        sock.setblocking(True)
        peer, _ = sock.accept()
        allowed, uid, pid = peer_allowed(peer)
        assert (allowed, uid, pid) == (True, os.geteuid(), os.getpid())
        peer.close()
        client.close()
    finally:
        sock.close()
    assert peer_allowed(None)[0] is False


def test_a_state_folder_too_deep_for_a_unix_socket_is_told() -> None:
    assert not socket_path_too_long(Path("/var/lib/gitlab-mcp-gateway/operator.sock"))
    assert socket_path_too_long(Path("/" + "x" * 100) / "operator.sock")


@pytest.mark.parametrize("console", [False, True])
async def test_a_socket_left_off_names_the_console_only_when_it_is_served(
    console: bool, caplog: pytest.LogCaptureFixture
) -> None:
    overrides: dict[str, Any] = (
        {"console": {"operator_token": "operator-secret-0123456789"}} if console else {}
    )
    settings = load_settings(
        gitlab={"url": "https://gitlab.example.com"}, state_dir="/" + "x" * 100, **overrides
    )
    app = web.Application()
    serve_operator_socket(app, settings)
    listener = app.cleanup_ctx[-1](app)
    assert isinstance(listener, AsyncIterator)  # the listener is an async generator
    with caplog.at_level(logging.WARNING, logger="gateway"):
        await anext(listener)
    [line] = [r.getMessage() for r in caplog.records if "operator socket off" in r.getMessage()]
    assert ("console (/broker)" in line) is console
    assert "a shorter GATEWAY_STATE_DIR turns it on" in line
    with contextlib.suppress(StopAsyncIteration):
        await anext(listener)
