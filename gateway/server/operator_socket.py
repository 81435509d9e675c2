"""The operator socket: the ``broker`` command line acts through the running gateway.

On the default setup (SQLite in the state folder) the gateway holds the folder's lock for its
life, so ``gitlab-mcp-gateway broker instruct`` cannot open the database to act, and a person
paged at night for a ``HUMAN_NEEDED`` would have to stop the gateway (ending every agent's wait)
or have set a console token in advance. Instead the gateway listens on a Unix socket in the
state folder, ``operator.sock``, and runs the command's action itself, exactly as the console
does: same change, same audit line naming the operator, same wake-ups of the agents' waits.

Who can reach it: only the gateway's own user (and root). The socket file is made with mode
0600 (bound in a fresh 0700 folder, then moved into place, so it is never open to others even
for a moment), and each connection's peer is checked with ``SO_PEERCRED``: another user's
process is refused even if the file's mode were loosened. Nothing listens on the network. The
socket serves actions only, not reads (``status``, ``history`` and ``log`` read the SQLite file
directly, beside the gateway).

Wire: HTTP/1.1 over the socket (aiohttp on both ends), ``POST /broker/<action>`` with a JSON
object ``{"operator": NAME, ...}``; the answer is ``{"result": {...}}`` (200) or
``{"error": {"reason", "message", ...}}`` (400 bad_request, 403 peer refused, 404 unknown
action, 409 conflict).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.broker.errors import BrokerError
from gateway.broker.operator import ACTIONS, operator_name
from gateway.broker.state_dir import OPERATOR_SOCKET, socket_path_too_long
from gateway.config import Settings
from gateway.server.services import SERVICES

log = logging.getLogger("gateway")

_STATUS = {"bad_request": 400, "not_found": 404, "conflict": 409}


def peer_allowed(sock: socket.socket | None) -> tuple[bool, int, int]:
    """``(allowed, uid, pid)`` of the process at the other end of ``sock``: allowed when it runs as
    this process's user or as root."""
    if sock is None:
        return False, -1, -1
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return uid in (os.geteuid(), 0), uid, pid


def _error(status: int, reason: str, message: str, **details: Any) -> web.Response:
    return web.json_response({"error": {"reason": reason, "message": message, **details}}, status=status)


async def _handle(request: web.Request, app: web.Application) -> web.Response:
    transport = request.transport
    allowed, uid, pid = peer_allowed(transport.get_extra_info("socket") if transport else None)
    if not allowed:
        log.warning("operator socket: refused uid %d (pid %d): not the gateway's user", uid, pid)
        return _error(403, "unauthorized", "Only the gateway's own user may act through its operator socket.")
    action = ACTIONS.get(request.match_info["action"])
    if action is None:
        return _error(404, "not_found", f"No such action; the actions are: {', '.join(ACTIONS)}.")
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return _error(400, "bad_request", "The request body must be a JSON object.")
    broker = app[SERVICES].broker
    if broker is None:
        return _error(409, "conflict", "This gateway has no broker open.")
    name = operator_name(body.get("operator"))
    try:
        result = await action(broker.operator, name, body)
    except BrokerError as err:
        return _error(_STATUS.get(err.reason, 409), err.reason, err.message, **err.details)
    log.info(
        "operator %s: %s through the operator socket (uid %d, pid %d)",
        name,
        request.match_info["action"],
        uid,
        pid,
    )
    return web.json_response({"result": result})


def bind_private_socket(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600 from the moment it is reachable there: bound
    in a new 0700 folder beside it and renamed into place (replacing a stale socket left by a
    gateway that was killed; the caller holds the state folder's lock)."""
    private = Path(tempfile.mkdtemp(prefix=".operator-", dir=path.parent))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        staged = private / "s"
        sock.bind(str(staged))
        os.chmod(staged, 0o600)
        os.replace(staged, path)
        sock.listen(16)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(private)
    return sock


def serve_operator_socket(app: web.Application, settings: Settings) -> None:
    """Serve the operator socket beside ``app`` when the broker is on SQLite (on PostgreSQL the
    command line commits to the database itself, as another replica would)."""
    if settings.broker.database_url is not None:
        return
    path = Path(settings.state_dir).resolve() / OPERATOR_SOCKET

    async def listener(main: web.Application) -> AsyncIterator[None]:
        if socket_path_too_long(path):
            # Name only the ways this gateway offers: the console when it is served.
            instead = (
                "need the console (/broker) while this gateway runs"
                if settings.console.enabled
                else "cannot act while this gateway runs (stop it first, or set a console token to "
                "act from /broker)"
            )
            log.warning(
                "operator socket off: the state folder's path is too long for a Unix socket (%s); "
                "broker commands that act %s; a shorter GATEWAY_STATE_DIR turns it on",
                path,
                instead,
            )
            yield
            return
        ops = web.Application()

        async def handle(request: web.Request) -> web.Response:
            return await _handle(request, main)

        ops.router.add_post("/broker/{action}", handle)
        runner = web.AppRunner(ops, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.SockSite(runner, bind_private_socket(path)).start()
            log.info("operator socket on at %s (this user only): broker commands act through it", path)
            yield
        finally:
            await runner.cleanup()
            with contextlib.suppress(OSError):
                path.unlink()

    app.cleanup_ctx.append(listener)
