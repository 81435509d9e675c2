"""DNS-rebinding protection: the ``Host`` and ``Origin`` checks of every ``/mcp`` request.

Rules (MCP 2025-11-25 basic/transports#security-warning; conformance ``dns-rebinding-protection``):

- ``Origin``, when present, must be a loopback origin (``localhost``, ``127.0.0.0/8``, ``[::1]``;
  any scheme and port), the origin of the bind address, or listed in ``server.allowed_origins``.
  Anything else, ``null`` included, is refused with 403.
- ``Host`` is checked when the gateway is bound to loopback, or when ``server.allowed_hosts`` is
  set: it must be a loopback name (any port), the bind address, or an ``allowed_hosts`` entry
  (``name`` matches any port, ``name:port`` only that port). A gateway bound to a non-loopback
  address without ``allowed_hosts`` (a container behind a service name) accepts any ``Host``: such
  a gateway must authenticate its callers anyway (``gateway.config`` refuses to start otherwise
  with a service token), and a rebinding page cannot present their secrets.
- With sign-in on, the host of ``sign_in.public_url`` is a name of the gateway too: the OAuth
  metadata sends every signed-in client there.
- A missing header passes: browsers, the only carriers of a rebinding attack, always send
  ``Host``, and send ``Origin`` on every cross-origin POST.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

from gateway.config import ServerSettings, is_loopback
from gateway.mcp.http.statuses import HttpRefusal
from gateway.mcp.protocol.wire import FORBIDDEN

_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})  # noqa: S104 - names, not a bind


def split_host(value: str) -> tuple[str, str | None]:
    """``"Example.COM:8080"`` → ``("example.com", "8080")``; ``"[::1]:80"`` → ``("::1", "80")``.

    The name is lowercased, IPv6 brackets and one trailing dot are removed; the port is None
    when absent.
    """
    value = value.strip().lower()
    port: str | None = None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return value, None
        name, rest = value[1:end], value[end + 1 :]
        if rest.startswith(":"):
            port = rest[1:]
    else:
        name, sep, maybe_port = value.rpartition(":")
        if sep and ":" not in name and maybe_port.isdigit():
            port = maybe_port
        else:
            name = value
    return name.rstrip("."), port


@functools.lru_cache(maxsize=256)
def is_loopback_name(name: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``); cached: the same
    few names come on every request, and parsing an address is most of the Host check."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _origin_parts(origin: str) -> tuple[str, str, str | None] | None:
    scheme, sep, rest = origin.strip().lower().partition("://")
    if not sep or scheme not in ("http", "https") or not rest or "/" in rest.rstrip("/"):
        return None
    name, port = split_host(rest.rstrip("/"))
    return scheme, name, port


def _normalise_origin(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


class OriginHostGuard:
    """Decides whether a request's ``Host`` and ``Origin`` headers are acceptable.

    Built once per app from ``server`` settings; ``also_hosts`` are names the gateway answers
    to besides ``server.allowed_hosts`` (``sign_in.public_url``'s), allowed without turning the
    ``Host`` check on where it is off.
    """

    def __init__(self, server: ServerSettings, also_hosts: Iterable[str] = ()) -> None:
        bind, _ = split_host(server.host)
        self._bind = None if server.host.strip() in _WILDCARD_BINDS else bind
        self.checks_host = is_loopback(server.host) or bool(server.allowed_hosts)
        self._names: set[str] = set()
        self._host_ports: set[tuple[str, str]] = set()
        if self._bind:
            self._names.add(self._bind)
        self._add_hosts(server.allowed_hosts)
        self._add_hosts(also_hosts)
        self._origins = {_normalise_origin(o) for o in server.allowed_origins}

    def _add_hosts(self, hosts: Iterable[str]) -> None:
        for entry in hosts:
            name, port = split_host(entry)
            if port is None:
                self._names.add(name)
            else:
                self._host_ports.add((name, port))

    def host_allowed(self, host: str) -> bool:
        """True when ``host`` (a ``Host`` header value) may reach this gateway."""
        name, port = split_host(host)
        return is_loopback_name(name) or name in self._names or (name, port or "") in self._host_ports

    def origin_allowed(self, origin: str) -> bool:
        """True when ``origin`` (an ``Origin`` header value) may call this gateway."""
        parts = _origin_parts(origin)
        return parts is not None and (
            is_loopback_name(parts[1])
            or (self._bind is not None and parts[1] == self._bind)
            or _normalise_origin(origin) in self._origins
        )

    def check(self, host: str | None, origin: str | None) -> HttpRefusal | None:
        """None when both headers pass, else the 403 error to answer with."""
        if origin is not None and not self.origin_allowed(origin):
            return HttpRefusal(
                FORBIDDEN,
                f"Forbidden: Origin {origin[:100]!r} may not call this gateway (DNS-rebinding "
                "protection). Call it from a local client, or add the origin to server.allowed_origins.",
                status=403,
            )
        if host is not None and self.checks_host and not self.host_allowed(host):
            return HttpRefusal(
                FORBIDDEN,
                f"Forbidden: Host {host[:100]!r} is not a name of this gateway (DNS-rebinding "
                "protection). Reach it as localhost or 127.0.0.1, or add the name to server.allowed_hosts.",
                status=403,
            )
        return None
