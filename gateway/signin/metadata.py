"""What clients discover: the Protected Resource Metadata of ``/mcp`` (RFC 9728) and the
authorization server's metadata (RFC 8414), and the challenge ``/mcp`` answers without a token.

https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization#authorization-server-discovery
"""

from __future__ import annotations

from typing import Any

from gateway.config import SignInSettings

SCOPES = ("mcp:read", "mcp:write")
PRM_PATH = "/.well-known/oauth-protected-resource"
AS_PATH = "/.well-known/oauth-authorization-server"


def resource_metadata_url(settings: SignInSettings) -> str:
    """Where ``/mcp``'s Protected Resource Metadata is (RFC 9728 §3.1: the resource's path appended)."""
    return f"{settings.issuer}{PRM_PATH}/mcp"


def challenge(settings: SignInSettings, error: str | None = None) -> str:
    """``WWW-Authenticate`` of a refused ``/mcp`` request (RFC 6750 §3, RFC 9728 §5.1)."""
    parts = [f'resource_metadata="{resource_metadata_url(settings)}"', f'scope="{" ".join(SCOPES)}"']
    if error is not None:
        parts.insert(0, f'error="{error}"')
    return "Bearer " + ", ".join(parts)


def protected_resource(settings: SignInSettings) -> dict[str, Any]:
    """RFC 9728 metadata of ``<public_url>/mcp``."""
    return {
        "resource": settings.resource,
        "authorization_servers": [settings.issuer],
        "scopes_supported": list(SCOPES),
        "bearer_methods_supported": ["header"],
        "resource_name": "GitLab MCP gateway",
    }


def authorization_server(settings: SignInSettings) -> dict[str, Any]:
    """RFC 8414 metadata of the gateway as an authorization server."""
    issuer = settings.issuer
    body: dict[str, Any] = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/oauth/authorize",
        "token_endpoint": f"{issuer}/oauth/token",
        "revocation_endpoint": f"{issuer}/oauth/revoke",
        "scopes_supported": list(SCOPES),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "client_id_metadata_document_supported": settings.client_metadata_documents,
        "authorization_response_iss_parameter_supported": True,
    }
    if settings.dynamic_registration:
        body["registration_endpoint"] = f"{issuer}/oauth/register"
    return body
