"""Listening sockets bound before anything else starts.

aiohttp binds its sites only after the app's start-up steps ran (the broker database opened,
created and migrated), and does not clean up what already started when a later step fails. So
the gateway binds its addresses first: a port in use is then one line and exit status 1, with no
database created. Bound as asyncio's ``create_server`` binds a host: every address the host
resolves to, ``SO_REUSEADDR`` on POSIX, IPv6 sockets IPv6-only.
"""

from __future__ import annotations

import os
import socket


def bound_sockets(host: str, port: int) -> list[socket.socket]:
    """TCP sockets bound to every address of ``host`` at ``port``, ready for ``listen()``.

    Raises:
        OSError: as asyncio words a bind failure (``error while attempting to bind on address
            ('127.0.0.1', 8080): address already in use``), with the errno kept;
            ``socket.gaierror`` when ``host`` resolves to nothing.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            # As asyncio's create_server does on POSIX: a restart may bind while old connections linger.
            if os.name == "posix":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as err:
                reason = (err.strerror or str(err)).lower()
                raise OSError(
                    err.errno, f"error while attempting to bind on address {address[:2]!r}: {reason}"
                ) from None
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound
