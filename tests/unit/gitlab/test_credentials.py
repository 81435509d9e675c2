"""Credential modes (``docs/operations.md``) and token-safe cache keys."""

from __future__ import annotations

import hmac
from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.gitlab.credentials import (
    ANONYMOUS,
    Credential,
    passthrough_credential,
    service_credential,
)


def headers(**values: str) -> CIMultiDictProxy[str]:
    """Request headers as aiohttp hands them over (case-insensitive)."""
    return CIMultiDictProxy(CIMultiDict({k.replace("_", "-"): v for k, v in values.items()}))


def test_service_credential_sends_private_token() -> None:
    cred = service_credential("glpat-svc")
    assert cred.headers() == {"PRIVATE-TOKEN": "glpat-svc"}
    assert cred.source == "service"


@pytest.mark.parametrize("token", [None, "", "   "])
def test_no_service_token_is_anonymous(token: str | None) -> None:
    assert service_credential(token) is ANONYMOUS
    assert ANONYMOUS.headers() == {}
    assert ANONYMOUS.cache_key == "anonymous"


@pytest.mark.parametrize(
    ("sent", "forwarded"),
    [
        ({"PRIVATE_TOKEN": "glpat-caller"}, {"PRIVATE-TOKEN": "glpat-caller"}),
        ({"private_token": " glpat-caller "}, {"PRIVATE-TOKEN": "glpat-caller"}),
        ({"Authorization": "Bearer oauth-caller"}, {"Authorization": "Bearer oauth-caller"}),
        ({"authorization": "bearer oauth-caller"}, {"Authorization": "Bearer oauth-caller"}),
        # PRIVATE-TOKEN wins when both are present: it is unambiguous.
        ({"PRIVATE_TOKEN": "glpat-a", "Authorization": "Bearer b"}, {"PRIVATE-TOKEN": "glpat-a"}),
    ],
)
def test_passthrough_forwards_the_callers_token_unchanged(
    sent: dict[str, str], forwarded: dict[str, str]
) -> None:
    cred = passthrough_credential(headers(**sent), authorization_is_gateway_secret=False)
    assert cred is not None and cred.source == "passthrough"
    assert cred.headers() == forwarded


@pytest.mark.parametrize(
    "sent",
    [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer two words"},
        {"PRIVATE_TOKEN": "has space"},
        {"PRIVATE_TOKEN": "tök"},
        {"PRIVATE_TOKEN": "a\x01b"},
    ],
)
def test_passthrough_without_a_usable_token_is_none(sent: dict[str, str]) -> None:
    assert passthrough_credential(headers(**sent), authorization_is_gateway_secret=False) is None


def test_passthrough_with_client_tokens_reads_only_private_token() -> None:
    # Authorization then carries the caller's gateway secret, which must never reach GitLab.
    assert (
        passthrough_credential(
            headers(Authorization="Bearer gw-secret"), authorization_is_gateway_secret=True
        )
        is None
    )
    cred = passthrough_credential(
        headers(Authorization="Bearer gw-secret", PRIVATE_TOKEN="glpat-c"),
        authorization_is_gateway_secret=True,
    )
    assert cred is not None and cred.headers() == {"PRIVATE-TOKEN": "glpat-c"}


def test_cache_key_is_computed_once_per_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real_new = hmac.new

    def counting_new(key: bytes, msg: bytes, digestmod: Any) -> Any:
        calls.append(msg)
        return real_new(key, msg, digestmod)

    monkeypatch.setattr(hmac, "new", counting_new)
    cred = Credential(header="PRIVATE-TOKEN", token="glpat-once")
    first = cred.cache_key
    assert all(cred.cache_key == first for _ in range(100))
    assert calls == [b"glpat-once"]
    assert cred == Credential(header="PRIVATE-TOKEN", token="glpat-once")  # the cache is no field
    assert hash(cred) == hash(Credential(header="PRIVATE-TOKEN", token="glpat-once"))


def test_cache_keys_partition_by_token_without_revealing_it() -> None:
    a = Credential(header="PRIVATE-TOKEN", token="glpat-aaaa")
    a_bearer = Credential(header="Authorization", token="glpat-aaaa", source="passthrough")
    b = Credential(header="PRIVATE-TOKEN", token="glpat-bbbb")
    assert a.cache_key == a_bearer.cache_key != b.cache_key
    assert len(a.cache_key) == 16 and "aaaa" not in a.cache_key
    assert "glpat-aaaa" not in repr(a) and "glpat-aaaa" not in str(a)
