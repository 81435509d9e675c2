"""A zip archive's central directory, read from its last bytes: where it is, and its entries.

A zip keeps the list of its files at its end (PKWARE's APPNOTE.TXT, sections 4.3.12 to 4.3.16):
the end-of-central-directory record (EOCD, 22 bytes plus a comment of up to 65,535 bytes) says
where the central directory starts and how long it is; a zip64 archive (more than 65,535 entries,
or offsets past 4 GiB) puts a zip64 EOCD locator (20 bytes) just before the EOCD, pointing at a
zip64 EOCD record (56 bytes). So the last :data:`TAIL_BYTES` of an archive always hold the EOCD
and the zip64 records, and a second read of exactly the directory's bytes gives every entry.

Why not :mod:`zipfile`: it builds a ``ZipInfo`` per entry for the whole directory before anything
can be asked, so the memory of one listing would grow with the entry count a CI job chose (a
crafted archive of tiny entries is hundreds of thousands of them); here entries are read one at a
time from the directory's bytes, and a page keeps only its own.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

#: EOCD (22) + its longest comment (65,535) + the zip64 locator (20) and record (56).
TAIL_BYTES = 22 + 65_535 + 20 + 56

_EOCD = struct.Struct(
    "<4s4H2LH"
)  # signature, disk, cd disk, entries here, entries, cd size, cd offset, comment
_EOCD_SIG = b"PK\x05\x06"
_LOCATOR = struct.Struct("<4sLQL")  # signature, disk of the zip64 record, its offset, disks
_LOCATOR_SIG = b"PK\x06\x07"
_ZIP64 = struct.Struct(
    "<4sQ2H2L4Q"
)  # signature, size, versions, disks, entries here, entries, cd size, offset
_ZIP64_SIG = b"PK\x06\x06"
_ENTRY = struct.Struct("<4s4B4HL2L5H2L")  # a central directory file header (46 bytes)
_ENTRY_SIG = b"PK\x01\x02"
_UTF8_FLAG = 0x800
_ZIP64_EXTRA = 0x0001
_MAX32 = 0xFFFFFFFF


class ZipFormatError(ValueError):
    """The bytes are not a zip archive's end, or its directory is damaged."""


@dataclass(frozen=True, slots=True)
class Directory:
    """Where the central directory is.

    Attributes:
        offset: its first byte in the archive.
        size: its length in bytes.
        entries: how many entries the EOCD says it holds.
    """

    offset: int
    size: int
    entries: int


@dataclass(frozen=True, slots=True)
class ZipEntry:
    """One entry of the directory: its path in the archive, uncompressed size, and kind."""

    path: str
    size: int
    is_dir: bool


def locate(tail: bytes, tail_offset: int) -> Directory:
    """The central directory of the archive whose bytes from ``tail_offset`` on are ``tail``
    (the archive's end: at least its last :data:`TAIL_BYTES`, or all of it).

    Raises:
        ZipFormatError: no EOCD in ``tail`` (not a zip), or records that contradict each other.
    """
    at = _find_eocd(tail)
    _, disk, cd_disk, _, entries, cd_size, _, _ = _EOCD.unpack_from(tail, at)
    if disk or cd_disk:
        raise ZipFormatError("the archive spans several disks")
    record_at = at  # where the directory ends: the zip64 record, else the EOCD
    locator_at = at - _LOCATOR.size
    if locator_at >= 0 and tail[locator_at : locator_at + 4] == _LOCATOR_SIG:
        _, _, zip64_offset, _ = _LOCATOR.unpack_from(tail, locator_at)
        zip64_at = zip64_offset - tail_offset
        if not 0 <= zip64_at <= len(tail) - _ZIP64.size or tail[zip64_at : zip64_at + 4] != _ZIP64_SIG:
            zip64_at = locator_at - _ZIP64.size  # data before the archive shifted its offsets
        if zip64_at < 0 or tail[zip64_at : zip64_at + 4] != _ZIP64_SIG:
            raise ZipFormatError("the zip64 end-of-central-directory record is missing")
        fields = _ZIP64.unpack_from(tail, zip64_at)
        entries, cd_size = fields[7], fields[8]
        record_at = zip64_at
    # The directory ends where the end records begin. Counting back from there, rather than
    # trusting the stored offset, also reads an archive with bytes before it (a self-extracting
    # stub), whose stored offsets are all shifted.
    start = tail_offset + record_at - cd_size
    if start < 0:
        raise ZipFormatError(f"the central directory ({cd_size} bytes) would start before the archive")
    return Directory(offset=start, size=cd_size, entries=entries)


def _find_eocd(tail: bytes) -> int:
    at = len(tail) - _EOCD.size
    if at >= 0 and tail[at : at + 4] == _EOCD_SIG and tail[-2:] == b"\x00\x00":
        return at  # no comment: the common case
    at = tail.rfind(_EOCD_SIG)
    while at >= 0:
        if at + _EOCD.size <= len(tail):
            comment = _EOCD.unpack_from(tail, at)[7]
            if at + _EOCD.size + comment == len(tail):
                return at
        at = tail.rfind(_EOCD_SIG, 0, at)
    raise ZipFormatError("no end-of-central-directory record: not a zip archive")


def entries(directory: bytes) -> Iterator[ZipEntry]:
    """The entries of a central directory's bytes, in the archive's order.

    Raises:
        ZipFormatError: a header without its signature, or cut short.
    """
    at = 0
    end = len(directory)
    while at < end:
        if end - at < _ENTRY.size or directory[at : at + 4] != _ENTRY_SIG:
            raise ZipFormatError(f"the central directory is damaged at byte {at}")
        fields = _ENTRY.unpack_from(directory, at)
        flags, size = fields[5], fields[11]
        name_len, extra_len, comment_len = fields[12], fields[13], fields[14]
        name_at = at + _ENTRY.size
        extra_at = name_at + name_len
        after = extra_at + extra_len + comment_len
        if after > end:
            raise ZipFormatError(f"the central directory is cut short at byte {at}")
        raw = directory[name_at:extra_at]
        path = raw.decode("utf-8", "replace") if flags & _UTF8_FLAG else raw.decode("cp437")
        if size == _MAX32:
            size = _zip64_size(directory[extra_at : extra_at + extra_len], size)
        yield ZipEntry(path=path, size=size, is_dir=path.endswith("/"))
        at = after


def _zip64_size(extra: bytes, size: int) -> int:
    """The uncompressed size from a zip64 extended information field (it comes first there)."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, at)
        if kind == _ZIP64_EXTRA and length >= 8:
            return int(struct.unpack_from("<Q", extra, at + 4)[0])
        at += 4 + length
    return size
