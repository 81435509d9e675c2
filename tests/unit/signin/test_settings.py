"""``[sign_in]``: off by default, and clear errors for what an operator gets wrong."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import Settings
from gateway.mcp.http.security import OriginHostGuard
from tests.unit.signin.conftest import sign_in_settings


def error_of(**overrides: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        Settings(**overrides)
    return str(caught.value)


def test_off_by_default() -> None:
    assert Settings().sign_in.enabled is False


def test_enabled_names_every_missing_setting() -> None:
    text = error_of(sign_in={"enabled": True, "public_url": "https://mcp.example.com"})
    assert "sign_in.gitlab_client_id (GATEWAY_SIGN_IN__GITLAB_CLIENT_ID)" in text
    assert "sign_in.encryption_key" in text and "docs/operations.md" in text


def test_public_url_must_be_https_off_loopback() -> None:
    text = error_of(sign_in=sign_in_settings(public_url="http://mcp.example.com"))
    assert "OAuth needs https" in text
    assert Settings(sign_in=sign_in_settings(public_url="https://mcp.example.com/")).sign_in.issuer == (
        "https://mcp.example.com"
    )


def test_the_encryption_key_must_be_32_bytes() -> None:
    text = error_of(sign_in=sign_in_settings(encryption_key="c2hvcnQ="))
    assert "decodes to 5 bytes, not 32" in text and "secrets.token_bytes(32)" in text


def test_roles_must_be_broker_agents() -> None:
    text = error_of(sign_in=sign_in_settings(roles={"alice": ["boss"]}))
    assert "'boss'" in text and "broker.agents" in text


def test_sign_in_and_passthrough_do_not_go_together() -> None:
    text = error_of(sign_in=sign_in_settings(), gitlab={"credential_mode": "passthrough"})
    assert "credential_mode = 'service'" in text


def test_the_client_secret_and_key_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_SIGN_IN__ENABLED", "true")
    monkeypatch.setenv("GATEWAY_SIGN_IN__PUBLIC_URL", "https://mcp.example.com")
    monkeypatch.setenv("GATEWAY_SIGN_IN__GITLAB_CLIENT_ID", "app")
    monkeypatch.setenv("GATEWAY_SIGN_IN__GITLAB_CLIENT_SECRET", "s3cret-from-env")
    monkeypatch.setenv("GATEWAY_SIGN_IN__ENCRYPTION_KEY", sign_in_settings()["encryption_key"])
    settings = Settings()
    assert settings.sign_in.enabled and settings.sign_in.resource == "https://mcp.example.com/mcp"
    assert "s3cret-from-env" not in repr(settings)


def test_role_access_names_broker_roles_and_a_burst_needs_a_rate() -> None:
    text = error_of(sign_in=sign_in_settings(role_access={"admin": {"read_only": True}}))
    assert "sign_in.role_access: 'admin' is not one of broker.agents" in text
    text = error_of(sign_in=sign_in_settings(role_access={"dev": {"burst": 3}}))
    assert "sign_in.role_access.dev sets burst but no calls_per_second" in text
    text = error_of(sign_in=sign_in_settings(role_access={"dev": {"toolsets": ["nope"]}}))
    assert "unknown toolset 'nope'" in text


def test_the_public_url_host_is_a_name_of_the_gateway() -> None:
    settings = Settings(
        server={"host": "127.0.0.1"}, sign_in=sign_in_settings(public_url="https://mcp.example.com")
    )
    guard = OriginHostGuard(settings.server, settings.sign_in.public_hosts)
    assert guard.check("mcp.example.com", None) is None
    assert guard.check("mcp.example.com:443", None) is None
    assert guard.check("other.example.com", None) is not None
    on_port = Settings(sign_in=sign_in_settings(public_url="https://mcp.example.com:8443")).sign_in
    assert on_port.public_hosts == ("mcp.example.com:8443",)
    assert Settings().sign_in.public_hosts == ()
