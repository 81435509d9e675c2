"""The rules of a Client ID Metadata Document and of its URL: pure checks, no network.

Sources: MCP's authorization specification ("Client ID Metadata Documents",
https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization) and the IETF draft
"OAuth Client ID Metadata Document"
(https://datatracker.ietf.org/doc/draft-ietf-oauth-client-id-metadata-document/).

- The URL (the ``client_id``): https, a host and a path, no fragment, no user name or password,
  no ``.``/``..`` segments.
- The document: a JSON object whose ``client_id`` equals the URL exactly (string comparison),
  that lists ``redirect_uris`` (each acceptable to :func:`validate_redirect_uri`), and that holds
  no shared secret: ``token_endpoint_auth_method`` absent or ``none``, no ``client_secret``. Only
  public clients come from documents; ``private_key_jwt`` (which MCP allows) is refused too,
  since the gateway keeps no client keys.

:mod:`gateway.signin.client_metadata` fetches and caches the documents.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from gateway.signin.redirects import validate_redirect_uri

__all__ = [
    "MAX_CLIENT_ID_LENGTH",
    "ClientMetadata",
    "ClientMetadataError",
    "check_client_id_url",
    "is_metadata_client_id",
    "parse_client_metadata",
]

#: Longest ``client_id`` URL fetched (characters): a bound, not a rule of the draft.
MAX_CLIENT_ID_LENGTH = 2000


@dataclass(frozen=True)
class ClientMetadata:
    """A client described by its metadata document."""

    client_id: str  #: the https URL itself
    client_name: str | None
    redirect_uris: tuple[str, ...]
    client_uri: str | None
    logo_uri: str | None
    token_endpoint_auth_method: str  #: always ``"none"``: documents describe public clients only


class ClientMetadataError(Exception):
    """A ``client_id`` URL or its document cannot be used. The message says what was wrong, in
    plain ASCII without quotes or backslashes (fit for an OAuth ``error_description``, RFC 6749
    §5.2), and never holds a stack trace or text from the fetched document."""


def is_metadata_client_id(client_id: str) -> bool:
    """Whether ``client_id`` is URL-formatted: ``https://``, a host, and a path other than
    ``/``. Such ids name a metadata document (:func:`check_client_id_url` checks the URL's
    other rules); any other id is a registered one."""
    if not client_id.startswith("https://"):
        return False
    try:
        parts = urlsplit(client_id)
    except ValueError:
        return False
    return bool(parts.hostname) and parts.path not in ("", "/")


def check_client_id_url(client_id: str) -> None:
    """Check the URL rules of a metadata ``client_id``.

    Raises:
        ClientMetadataError: which rule the URL breaks.
    """
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise ClientMetadataError(f"the client_id URL is longer than {MAX_CLIENT_ID_LENGTH} characters")
    if not is_metadata_client_id(client_id):
        raise ClientMetadataError("a client_id URL must be an https URL with a host and a path")
    if "#" in client_id:
        raise ClientMetadataError("the client_id URL must not contain a fragment (#)")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in client_id):
        raise ClientMetadataError("the client_id URL contains whitespace or control characters")
    parts = urlsplit(client_id)
    if parts.username is not None or parts.password is not None:
        raise ClientMetadataError("the client_id URL must not contain a user name or password")
    if any(unquote(segment) in (".", "..") for segment in parts.path.split("/")):
        raise ClientMetadataError("the client_id URL must not contain . or .. path segments")
    try:
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise ClientMetadataError("the client_id URL has an invalid port") from None


def _optional_https(document: dict[str, Any], name: str) -> str | None:
    value = document.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("https://"):
        raise ClientMetadataError(f"the client metadata document's {name} must be an https URL")
    return value


def parse_client_metadata(client_id: str, body: bytes) -> ClientMetadata:
    """The metadata in ``body``, the document fetched from the URL ``client_id``.

    Raises:
        ClientMetadataError: the body is not a JSON object, or the document breaks a rule
            (its ``client_id``, ``redirect_uris``, a secret, ``grant_types``...).
    """
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; deep nesting recurses
        raise ClientMetadataError("the client metadata document is not valid JSON") from None
    if not isinstance(document, dict):
        raise ClientMetadataError("the client metadata document must be a JSON object")
    if document.get("client_id") != client_id:
        raise ClientMetadataError(
            "the client_id in the client metadata document does not equal the URL it was fetched from"
        )
    if "client_secret" in document:
        raise ClientMetadataError(
            "a client metadata document must not contain a client_secret: such clients are public clients"
        )
    if document.get("token_endpoint_auth_method", "none") != "none":
        raise ClientMetadataError(
            "the client metadata document's token_endpoint_auth_method must be none (or absent): only public "
            "clients are accepted from metadata documents, without client secrets or keys"
        )
    uris = document.get("redirect_uris")
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        raise ClientMetadataError("the client metadata document must list its redirect_uris (strings)")
    for uri in uris:
        if (reason := validate_redirect_uri(uri)) is not None:
            raise ClientMetadataError(f"the client metadata document has a redirect URI refused: {reason}")
    for field, needed in (("grant_types", "authorization_code"), ("response_types", "code")):
        listed = document.get(field)
        if listed is not None and (not isinstance(listed, list) or needed not in listed):
            raise ClientMetadataError(f"the client metadata document's {field} must include {needed}")
    name = document.get("client_name")
    if name is not None and not isinstance(name, str):
        raise ClientMetadataError("the client metadata document's client_name must be a string")
    return ClientMetadata(
        client_id=client_id,
        client_name=name,
        redirect_uris=tuple(uris),
        client_uri=_optional_https(document, "client_uri"),
        logo_uri=_optional_https(document, "logo_uri"),
        token_endpoint_auth_method="none",  # noqa: S106  (an OAuth method name, not a password)
    )
