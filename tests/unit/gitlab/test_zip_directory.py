"""A zip's central directory found from the archive's end and read entry by entry
(PKWARE APPNOTE.TXT 4.3.12-4.3.16), compared with what :mod:`zipfile` reads from the whole archive."""

from __future__ import annotations

import io
import zipfile

import pytest

from gateway.gitlab.zip_directory import TAIL_BYTES, ZipFormatError, entries, locate


def archive(names: list[str], *, comment: bytes = b"", method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for i, name in enumerate(names):
            zf.writestr(name, b"x" * i)
        zf.comment = comment
    return buf.getvalue()


def listed(data: bytes) -> list[tuple[str, int, bool]]:
    tail_offset = max(0, len(data) - TAIL_BYTES)
    where = locate(data[tail_offset:], tail_offset)
    return [(e.path, e.size, e.is_dir) for e in entries(data[where.offset : where.offset + where.size])]


def expected(data: bytes) -> list[tuple[str, int, bool]]:
    return [(i.filename, i.file_size, i.is_dir()) for i in zipfile.ZipFile(io.BytesIO(data)).infolist()]


def test_names_sizes_and_folders_match_zipfile_with_a_comment_and_non_ascii_names() -> None:
    data = archive(["logs/", "logs/integration.log", "grüße/日本語.txt", "a b/c.txt"], comment=b"#" * 65_000)
    assert listed(data) == expected(data)
    assert listed(data)[0] == ("logs/", 0, True)


def test_an_archive_with_bytes_before_it_is_read_from_where_its_directory_really_is() -> None:
    data = b"#!/bin/sh\nexit 0\n" * 100 + archive(["a.txt", "b/c.txt"])
    assert [name for name, _, _ in listed(data)] == ["a.txt", "b/c.txt"]


def test_zip64_records_and_sizes_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 1)  # zip64 end records past 1 entry
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 2)  # zip64 sizes past 2 bytes
    data = archive(["a", "b", "c", "d"], method=zipfile.ZIP_STORED)
    assert b"PK\x06\x06" in data
    assert (
        listed(data) == expected(data) == [("a", 0, False), ("b", 1, False), ("c", 2, False), ("d", 3, False)]
    )


def test_what_is_not_a_zip_or_is_damaged_says_so() -> None:
    with pytest.raises(ZipFormatError, match="not a zip archive"):
        locate(b"GIF89a" + bytes(100), 0)
    data = archive(["a.txt", "b.txt"])
    where = locate(data, 0)
    with pytest.raises(ZipFormatError, match="cut short"):
        list(entries(data[where.offset : where.offset + where.size - 3]))
    with pytest.raises(ZipFormatError, match="damaged"):
        list(entries(b"PK\x03\x04" + bytes(60)))
