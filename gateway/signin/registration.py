"""``POST /oauth/register``: OAuth 2.0 Dynamic Client Registration (RFC 7591).

A client registers its redirect URIs (``redirects.validate_redirect_uri`` says which are accepted)
and how it authenticates at the token endpoint: ``none`` (a public client, PKCE only) or a
client secret, which the gateway makes, returns once and keeps as a hash.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from gateway.broker.store import StoreError
from gateway.signin.bounds import REGISTER
from gateway.signin.clients import AUTH_METHODS, MAX_REDIRECT_URIS
from gateway.signin.redirects import validate_redirect_uri
from gateway.signin.responses import json_answer, oauth_error
from gateway.signin.sealing import hashed, new_secret
from gateway.signin.service import SignIn

MAX_BODY_BYTES = 16_384
_GRANT_TYPES = {"authorization_code", "refresh_token"}


def _metadata_problem(body: Any) -> tuple[str, str] | None:
    """(error, description) when the registration cannot be accepted."""
    if not isinstance(body, dict):
        return "invalid_client_metadata", "the body must be a JSON object of client metadata (RFC 7591 §2)"
    uris = body.get("redirect_uris")
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        return "invalid_redirect_uri", "redirect_uris must be a non-empty list of URIs"
    if len(uris) > MAX_REDIRECT_URIS:
        return "invalid_redirect_uri", f"at most {MAX_REDIRECT_URIS} redirect_uris"
    for uri in uris:
        problem = validate_redirect_uri(uri)
        if problem is not None:
            return "invalid_redirect_uri", problem
    method = body.get("token_endpoint_auth_method", "client_secret_basic")
    if method not in AUTH_METHODS:
        return (
            "invalid_client_metadata",
            f"token_endpoint_auth_method must be one of {', '.join(AUTH_METHODS)}",
        )
    grants = body.get("grant_types", ["authorization_code"])
    if not isinstance(grants, list) or not set(grants) <= _GRANT_TYPES:
        return "invalid_client_metadata", "grant_types may hold only authorization_code and refresh_token"
    responses = body.get("response_types", ["code"])
    if not isinstance(responses, list) or not set(responses) <= {"code"}:
        return "invalid_client_metadata", "response_types may hold only code"
    name = body.get("client_name")
    if name is not None and (not isinstance(name, str) or len(name) > 200):
        return "invalid_client_metadata", "client_name must be a string of at most 200 characters"
    return None


async def register(request: web.Request, sign_in: SignIn) -> web.Response:
    """Register a client; 201 with its ``client_id`` (and ``client_secret``)."""
    if not sign_in.settings.sign_in.dynamic_registration:
        return oauth_error("access_denied", "this gateway does not accept dynamic client registration", 403)
    wait = sign_in.bounds.retry_after(REGISTER, request.remote)
    if wait is not None:
        return oauth_error(
            "temporarily_unavailable", sign_in.bounds.address_refusal(wait), 429, {"Retry-After": str(wait)}
        )
    if (request.content_length or 0) > MAX_BODY_BYTES:
        return oauth_error("invalid_client_metadata", f"the body is larger than {MAX_BODY_BYTES} bytes")
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    try:
        body = json.loads(raw)
    except ValueError:
        return oauth_error("invalid_client_metadata", "the body is not JSON")
    problem = _metadata_problem(body)
    if problem is not None:
        return oauth_error(*problem)
    try:
        full = await sign_in.bounds.clients_full()
    except StoreError:
        return oauth_error(
            "temporarily_unavailable", "the gateway's database does not answer; try again", 503
        )
    if full is not None:
        return oauth_error("temporarily_unavailable", full, 429)
    method = body.get("token_endpoint_auth_method", "client_secret_basic")
    secret = None if method == "none" else new_secret("gwcs_")
    name = body.get("client_name")
    uris = tuple(body["redirect_uris"])
    client_id = await sign_in.storage.add_client(
        secret_hash=None if secret is None else hashed(secret),
        name=name,
        redirect_uris=uris,
        auth_method=method,
    )
    answer: dict[str, Any] = {
        "client_id": client_id,
        "client_id_issued_at": int(sign_in.clock()),
        "redirect_uris": list(uris),
        "token_endpoint_auth_method": method,
        "grant_types": body.get("grant_types", ["authorization_code"]),
        "response_types": ["code"],
    }
    if name is not None:
        answer["client_name"] = name
    if secret is not None:
        answer["client_secret"] = secret
        answer["client_secret_expires_at"] = 0
    return json_answer(answer, 201)
