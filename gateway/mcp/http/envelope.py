"""Which era a POST speaks, and the header checks of a stateless (2026-07-28) request.

Source: https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/streamable-http
(headers, status codes).

The era is chosen per request from the ``MCP-Protocol-Version`` header (a stateless version →
stateless; a handshake version or none → handshake), as the SDK's dual-era server does. A body
that carries the stateless ``_meta`` version but no header is stateless too, and is refused for
the missing header (-32020) rather than taken for a handshake request without a session.

A stateless request repeats in headers what its body says: ``MCP-Protocol-Version``,
``Mcp-Method`` and (for ``tools/call``) ``Mcp-Name``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

from gateway.mcp.protocol.eras import (
    HANDSHAKE_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    STATELESS_METHODS,
    STATELESS_VERSIONS,
    Envelope,
    Era,
    unsupported_version,
)
from gateway.mcp.protocol.wire import HEADER_MISMATCH, INVALID_PARAMS, METHOD_NOT_FOUND, RpcError

VERSION_HEADER: Final = "MCP-Protocol-Version"
METHOD_HEADER: Final = "Mcp-Method"
NAME_HEADER: Final = "Mcp-Name"
#: Methods whose ``Mcp-Name`` header must repeat a body parameter, and which one.
NAME_PARAMS: Final = {
    "tools/call": "name",
    "resources/read": "uri",
    "prompts/get": "name",
    # The tasks extension: the task id, so a proxy can route a task's requests.
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

_B64_SENTINEL = re.compile(r"=\?base64\?(?P<payload>[A-Za-z0-9+/]*={0,2})\?=")


def choose_era(header_version: str | None, decoded: Any) -> Era:
    """The era of one POST.

    Raises:
        RpcError: -32022 for a ``MCP-Protocol-Version`` that is no served revision.
    """
    if header_version is None:
        meta = _meta_of(decoded)
        return Era.STATELESS if meta is not None and PROTOCOL_VERSION_META_KEY in meta else Era.HANDSHAKE
    if header_version in STATELESS_VERSIONS:
        return Era.STATELESS
    if header_version in HANDSHAKE_VERSIONS:
        return Era.HANDSHAKE
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


def mismatch(message: str) -> RpcError:
    """-32020 HeaderMismatch."""
    return RpcError(HEADER_MISMATCH, message)


#: Longest caller value an error echoes whole.
_ECHO_CHARS = 80


def _echoed(value: object) -> str:
    """A caller's value quoted for an error: cut to :data:`_ECHO_CHARS` and in printable ASCII
    (JSON escapes), so a long or hostile value cannot flood or forge what the client shows."""
    text = value if isinstance(value, str) else json.dumps(value)
    shown = json.dumps(text[:_ECHO_CHARS])
    return shown if len(text) <= _ECHO_CHARS else f"{shown}… ({len(text)} characters)"


def check_stateless_request(
    method: str,
    params: dict[str, Any] | None,
    headers: Mapping[str, str],
    methods: frozenset[str] = STATELESS_METHODS,
) -> Envelope:
    """The checks of a 2026-07-28 request, in order: the method is served (-32601 for unknown
    methods and those the era removed: ``initialize``, ``ping``, ``logging/setLevel``), ``_meta``
    is complete (-32602), the headers repeat the body (-32020), the version is served (-32022).

    Args:
        headers: the HTTP request's headers (case-insensitive mapping).
        methods: the methods served in this era.

    Raises:
        RpcError: the first check that failed.
    """
    if method not in methods:
        raise RpcError(
            METHOD_NOT_FOUND,
            f"Method not found: {method[:100]} is not served in protocol {STATELESS_VERSIONS[0]} (this "
            f"gateway answers {', '.join(sorted(methods))}; initialize and ping belong to the "
            f"{LATEST_HANDSHAKE_VERSION} handshake era).",
        )
    meta = (params or {}).get("_meta")
    if not isinstance(meta, dict):
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: a {STATELESS_VERSIONS[0]} request carries params._meta with "
            f"{PROTOCOL_VERSION_META_KEY!r} and {CLIENT_CAPABILITIES_META_KEY!r}.",
        )
    missing = [k for k in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if k not in meta]
    if missing:
        raise RpcError(
            INVALID_PARAMS, f"Invalid params: params._meta lacks {' and '.join(map(repr, missing))}."
        )
    version = meta[PROTOCOL_VERSION_META_KEY]
    capabilities = meta[CLIENT_CAPABILITIES_META_KEY]
    client_info = meta.get(CLIENT_INFO_META_KEY)
    if not isinstance(version, str) or not isinstance(capabilities, dict):
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params: _meta[{PROTOCOL_VERSION_META_KEY!r}] must be a string and "
            f"_meta[{CLIENT_CAPABILITIES_META_KEY!r}] an object.",
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
        received = headers.get(NAME_HEADER)
        if decode_header_value(received) != body_value:
            got = f"no {NAME_HEADER} header" if received is None else f"{NAME_HEADER}: {_echoed(received)}"
            raise mismatch(
                f"Header mismatch: {NAME_HEADER} must equal params.{name_key}, "
                f"{_echoed(body_value)}, but the request sent {got}. Send "
                f"{NAME_HEADER} with the same value as params.{name_key} (base64-wrapped as "
                "=?base64?<base64 of its UTF-8>?= when it is not plain ASCII)."
            )
    if version not in STATELESS_VERSIONS:
        raise unsupported_version(version)
    return Envelope(version, capabilities, client_info if isinstance(client_info, dict) else None)
