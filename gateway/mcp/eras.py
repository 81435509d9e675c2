"""Protocol eras: which revision a request speaks, and the checks of a 2026-07-28 request.

Sources: https://modelcontextprotocol.io/specification/2026-07-28/basic/versioning (eras, the
dual-era server), ``.../basic/transports/streamable-http`` (headers, status codes) and
``.../basic/index`` (per-request ``_meta``).

- **Legacy** (2025-11-25, 2025-06-18, 2025-03-26): an ``initialize`` handshake opens a session.
- **Modern** (2026-07-28): stateless; every request carries ``_meta`` with its protocol version
  and client capabilities, and the headers ``MCP-Protocol-Version``, ``Mcp-Method`` and (for
  ``tools/call``) ``Mcp-Name`` repeat what the body says.

The era is chosen per request from the ``MCP-Protocol-Version`` header (a modern version →
modern; a handshake version or none → legacy), as the SDK's dual-era server does. A body that
carries the modern ``_meta`` version but no header is modern too, and is refused for the missing
header (-32020) rather than taken for a legacy request without a session.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

from gateway.mcp.wire import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)

VERSION_HEADER: Final = "MCP-Protocol-Version"
METHOD_HEADER: Final = "Mcp-Method"
NAME_HEADER: Final = "Mcp-Name"

#: The handshake revisions ``initialize`` negotiates, newest first.
LEGACY_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26")
#: The answer to an ``initialize`` asking for a revision not in :data:`LEGACY_VERSIONS`.
LATEST_LEGACY_VERSION: Final = LATEST_HANDSHAKE_VERSION
MODERN_VERSIONS: Final = tuple(MODERN_PROTOCOL_VERSIONS)
#: Every revision served, both eras (``server/discover``'s ``supportedVersions``, -32022's list).
SUPPORTED_VERSIONS: Final = (*MODERN_VERSIONS, *LEGACY_VERSIONS)
#: What a legacy request without ``MCP-Protocol-Version`` (and no session to tell) speaks
#: (MCP 2025-11-25 basic/transports#protocol-version-header).
DEFAULT_HEADER_VERSION: Final = "2025-03-26"
#: Revisions from which JSON-RPC batches are refused (batching was removed in 2025-06-18).
NO_BATCH_VERSIONS: Final = frozenset({"2025-11-25", "2025-06-18"})

#: Methods a modern request may name (tools only; nothing else is offered).
MODERN_METHODS: Final = frozenset({"server/discover", "tools/list", "tools/call"})
#: Methods whose ``Mcp-Name`` header must repeat a body parameter, and which one.
NAME_PARAMS: Final = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}

_B64_SENTINEL = re.compile(r"=\?base64\?(?P<payload>[A-Za-z0-9+/]*={0,2})\?=")


class Era(Enum):
    LEGACY = "legacy"
    MODERN = "modern"


def unsupported_version(requested: str) -> RpcError:
    """400 + -32022 naming both eras' versions: a dual-era client then falls back to
    ``initialize`` (it only gives up when ``supported`` lists no handshake version)."""
    return RpcError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version {requested[:64]!r}: this gateway speaks "
        f"{', '.join(SUPPORTED_VERSIONS)}. Send MCP-Protocol-Version: {MODERN_VERSIONS[0]} with "
        f"per-request _meta, or initialize with {LATEST_LEGACY_VERSION}.",
        http_status=400,
        data={"supported": list(SUPPORTED_VERSIONS), "requested": requested[:64]},
    )


def modern_status(err: RpcError) -> int:
    """The HTTP status of an error in the 2026-07-28 era, where request errors are HTTP errors
    too: 404 for -32601, 400 for the other protocol errors; -32603 and errors that already name a
    status (401, 403, 5xx) keep theirs."""
    if err.http_status != 200 or err.code == INTERNAL_ERROR or err.code > -32000:
        return err.http_status
    return 404 if err.code == METHOD_NOT_FOUND else 400


def choose_era(header_version: str | None, decoded: Any) -> Era:
    """The era of one POST.

    Raises:
        RpcError: 400 + -32022 for a ``MCP-Protocol-Version`` that is no served revision.
    """
    if header_version is None:
        meta = _meta_of(decoded)
        return Era.MODERN if meta is not None and PROTOCOL_VERSION_META_KEY in meta else Era.LEGACY
    if header_version in MODERN_VERSIONS:
        return Era.MODERN
    if header_version in LEGACY_VERSIONS:
        return Era.LEGACY
    raise unsupported_version(header_version)


def _meta_of(decoded: Any) -> dict[str, Any] | None:
    if not isinstance(decoded, dict):
        return None
    params = decoded.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else None


def decode_header_value(value: str | None) -> str | None:
    """A header value, with the ``=?base64?…?=`` sentinel of unsafe values decoded (None when
    the sentinel is malformed, so a corrupt header never matches a body value)."""
    if value is None:
        return None
    match = _B64_SENTINEL.fullmatch(value)
    if match is None:
        return value
    try:
        return base64.b64decode(match.group("payload"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class Envelope:
    """What a modern request's ``_meta`` declares about its client."""

    protocol_version: str
    client_capabilities: dict[str, Any]
    client_info: dict[str, Any] | None


def mismatch(message: str) -> RpcError:
    """400 + -32020 HeaderMismatch."""
    return RpcError(HEADER_MISMATCH, message, http_status=400)


def check_modern_request(
    method: str, params: dict[str, Any] | None, headers: Any, methods: frozenset[str] = MODERN_METHODS
) -> Envelope:
    """The checks of a 2026-07-28 request, in order: the method is served (404 + -32601 for
    unknown methods and those the era removed: ``initialize``, ``ping``, ``logging/setLevel``),
    ``_meta`` is complete (400 + -32602), the headers repeat the body (400 + -32020).

    Args:
        headers: the HTTP request's headers (case-insensitive mapping).
        methods: the methods served in this era.

    Raises:
        RpcError: the first check that failed.
    """
    if method not in methods:
        raise RpcError(
            METHOD_NOT_FOUND,
            f"Method not found: {method[:100]} is not served in protocol {MODERN_VERSIONS[0]} (this gateway "
            f"answers {', '.join(sorted(methods))}; initialize and ping belong to the "
            f"{LATEST_LEGACY_VERSION} handshake era).",
            http_status=404,
        )
    meta = (params or {}).get("_meta")
    if not isinstance(meta, dict):
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: a {MODERN_VERSIONS[0]} request carries params._meta with "
            f"{PROTOCOL_VERSION_META_KEY!r} and {CLIENT_CAPABILITIES_META_KEY!r}.",
            http_status=400,
        )
    missing = [k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta]
    if missing:
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: params._meta lacks {' and '.join(map(repr, missing))}.",
            http_status=400,
        )
    version = meta[PROTOCOL_VERSION_META_KEY]
    capabilities = meta[CLIENT_CAPABILITIES_META_KEY]
    client_info = meta.get(CLIENT_INFO_META_KEY)
    if not isinstance(version, str) or not isinstance(capabilities, dict):
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: _meta[{PROTOCOL_VERSION_META_KEY!r}] must be a string and "
            f"_meta[{CLIENT_CAPABILITIES_META_KEY!r}] an object.",
            http_status=400,
        )
    if headers.get(VERSION_HEADER) != version:
        raise mismatch(
            f"Header mismatch: {VERSION_HEADER} must be sent and equal params._meta "
            f"{PROTOCOL_VERSION_META_KEY!r} ({version[:64]!r})."
        )
    if headers.get(METHOD_HEADER) != method:
        raise mismatch(
            f"Header mismatch: {METHOD_HEADER} must be sent and equal the body's method ({method})."
        )
    name_key = NAME_PARAMS.get(method)
    if name_key is not None:
        body_value = (params or {}).get(name_key)
        if decode_header_value(headers.get(NAME_HEADER)) != body_value:
            raise mismatch(
                f"Header mismatch: {NAME_HEADER} must be sent and equal params.{name_key} "
                "(base64-wrapped as =?base64?…?= when it is not plain ASCII)."
            )
    if version not in MODERN_VERSIONS:
        raise unsupported_version(version)
    return Envelope(version, capabilities, client_info if isinstance(client_info, dict) else None)
