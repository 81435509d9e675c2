"""The ``broker`` command line's side of the operator socket (``gateway.server.operator_socket``):
act through the gateway that holds the SQLite state folder, without stopping it.

HTTP over the Unix socket ``<state_dir>/operator.sock`` with aiohttp's ``UnixConnector``; the
socket's file mode (0600) and the gateway's ``SO_PEERCRED`` check let only the gateway's own
user (and root) in.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import aiohttp

from gateway.broker.errors import BrokerError
from gateway.broker.state_dir import OPERATOR_SOCKET

#: Seconds to wait for the gateway's answer: an action is one short database transaction.
TIMEOUT_SECONDS = 30.0


class GatewayUnreachable(Exception):
    """The operator socket is there but nobody answers on it (a gateway killed, say)."""


def socket_of(state_dir: Path) -> Path:
    return state_dir / OPERATOR_SOCKET


def answers(path: Path) -> bool:
    """A gateway listens on the operator socket at ``path``."""
    if not path.exists():
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(2)
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


async def act(path: Path, action: str, operator: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Ask the gateway listening at ``path`` to do ``action`` as ``operator``; its result.

    Raises:
        BrokerError: the broker refused (a wrong state, say), as the console would show it.
        GatewayUnreachable: no gateway answers on the socket.
    """
    connector = aiohttp.UnixConnector(path=str(path))
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
    try:
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.post(
                f"http://gateway/broker/{action}", json={"operator": operator, **arguments}
            ) as response,
        ):
            body = await response.json(content_type=None)
    except (aiohttp.ClientConnectionError, TimeoutError) as err:
        raise GatewayUnreachable(f"no gateway answers on {path} ({err})") from None
    except (aiohttp.ClientError, ValueError) as err:
        raise GatewayUnreachable(f"the gateway's answer on {path} could not be read ({err})") from None
    if response.status != 200 or not isinstance(body, dict) or "result" not in body:
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            raise GatewayUnreachable(f"the gateway answered {response.status} on {path}")
        details = {k: v for k, v in error.items() if k not in ("reason", "message")}
        raise BrokerError(error.get("reason", "conflict"), str(error.get("message")), **details)
    result: dict[str, Any] = body["result"]
    return result
