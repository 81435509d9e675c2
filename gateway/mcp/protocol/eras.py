"""Protocol eras: what a request speaks, named by what sets the eras apart.

Sources: https://modelcontextprotocol.io/specification/2026-07-28/basic/versioning (eras, the
dual-era server) and ``.../basic/index`` (per-request ``_meta``).

- **Handshake** (2025-11-25, 2025-06-18, 2025-03-26): an ``initialize`` handshake negotiates the
  revision and opens a session; later requests are served within it.
- **Stateless** (2026-07-28): no handshake and no session; every request carries ``_meta`` with
  its protocol version and client capabilities (:class:`Envelope`).

How a transport tells them apart is its own business (over HTTP: ``gateway.mcp.http.envelope``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

from gateway.mcp.protocol.wire import UNSUPPORTED_PROTOCOL_VERSION, RpcError

__all__ = [
    "HANDSHAKE_VERSIONS",
    "LATEST_HANDSHAKE_VERSION",
    "NO_BATCH_VERSIONS",
    "STATELESS_METHODS",
    "STATELESS_VERSIONS",
    "SUPPORTED_VERSIONS",
    "Envelope",
    "Era",
    "unsupported_version",
]

#: The handshake revisions ``initialize`` negotiates, newest first; an ``initialize`` asking for
#: another is answered with :data:`LATEST_HANDSHAKE_VERSION`.
HANDSHAKE_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26")
STATELESS_VERSIONS: Final = tuple(MODERN_PROTOCOL_VERSIONS)
#: Every revision served, both eras (``server/discover``'s ``supportedVersions``, -32022's list).
SUPPORTED_VERSIONS: Final = (*STATELESS_VERSIONS, *HANDSHAKE_VERSIONS)
#: Revisions from which JSON-RPC batches are refused (batching was removed in 2025-06-18).
NO_BATCH_VERSIONS: Final = frozenset({"2025-11-25", "2025-06-18"})
#: Methods a stateless request may name (tools only; a test mode may add its own).
STATELESS_METHODS: Final = frozenset({"server/discover", "tools/list", "tools/call"})


class Era(Enum):
    """The era of a request. The values are the ``era`` of the access line, which operators
    filter on; they stay as first published."""

    HANDSHAKE = "legacy"
    STATELESS = "modern"


@dataclass(frozen=True)
class Envelope:
    """What a stateless request's ``_meta`` declares about its client."""

    protocol_version: str
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any] | None


def unsupported_version(requested: str) -> RpcError:
    """-32022 naming both eras' versions: a dual-era client then falls back to ``initialize`` (it
    only gives up when ``supported`` lists no handshake version)."""
    return RpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {requested[:64]!r}: this gateway speaks "
        f"{', '.join(SUPPORTED_VERSIONS)}. Send MCP-Protocol-Version: {STATELESS_VERSIONS[0]} with "
        f"per-request _meta, or initialize with {LATEST_HANDSHAKE_VERSION}.",
        data={"supported": list(SUPPORTED_VERSIONS), "requested": requested[:64]},
    )
