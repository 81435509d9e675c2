"""GitLab's tokens at rest: AES-GCM with the deployment's key, bound to their grant."""

from __future__ import annotations

import pytest

from gateway.signin.sealing import Sealer, SealError, hashed, new_secret


def test_a_sealed_token_opens_only_with_its_key_and_its_row() -> None:
    sealer = Sealer(bytes(range(32)))
    sealed = sealer.seal("glpat-oauth-secret", "grant-1")
    assert "glpat" not in sealed
    assert sealer.open(sealed, "grant-1") == "glpat-oauth-secret"
    with pytest.raises(SealError):
        sealer.open(sealed, "grant-2")  # copied onto another grant
    with pytest.raises(SealError):
        Sealer(bytes(32)).open(sealed, "grant-1")  # encryption_key changed
    assert sealer.seal("same", "g") != sealer.seal("same", "g")  # a fresh nonce each time


def test_secrets_are_random_and_kept_as_hashes() -> None:
    one, two = new_secret("gwat_"), new_secret("gwat_")
    assert one != two and one.startswith("gwat_") and len(one) > 40
    assert hashed(one) != one and len(hashed(one)) == 64
