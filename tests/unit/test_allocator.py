"""The allocator setting at start: applied on glibc, never over an operator's own."""

from __future__ import annotations

import platform

import pytest

from gateway.allocator import fix_mmap_threshold


def test_an_operators_own_threshold_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "262144")
    assert fix_mmap_threshold() is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_threshold_is_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert fix_mmap_threshold() is True
