"""File contents of the stand-in's repositories, generated deterministically.

Every generator returns the same bytes on every call and in every process, so tests can rebuild
the expected content locally (``from tests.standin.content import mixed_text``) and compare byte
for byte with what came through the gateway.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from functools import cache

#: Lines of :func:`mixed_text` (each ends with ``\n`` or ``\r\n``; the last one too).
MIXED_LINES = 5000

#: Size of :func:`ten_mib_text` in bytes (exactly 10 MiB: GitLab's ``MAX_DATA_DISPLAY_SIZE``, so
#: GitLab returns it whole, not truncated).
TEN_MIB = 10 * 1024 * 1024
#: Lines of :func:`ten_mib_text`: 1,165,084 lines ``L0000001`` … ``L1165084`` (9 bytes each with
#: the newline) and a last line ``end`` (4 bytes).
TEN_MIB_LINES = 1_165_085

#: Bytes the stand-in returns for the truncated file (GitLab returns the first 10 MiB; the shape
#: that matters, ``rawSize`` larger than the text returned, is the same).
TRUNCATED_RETURNED = 65_536
#: The truncated file's real size (``rawSize``).
TRUNCATED_FULL_SIZE = 20 * 1024 * 1024

#: Length of the single line of :func:`one_long_line` (more than the 1 MiB window cap).
LONG_LINE_BYTES = 1_200_000

_SAMPLES = (
    "plain ASCII text with some words",
    "déjà vu — café crème, naïve façade",  # Latin-1 range, 2-byte UTF-8
    "日本語のテキストと漢字",  # 3-byte UTF-8
    "emoji 🎉🚀✨ and \U0001d518\U0001d52b\U0001d526",  # 4-byte UTF-8 (Fraktur letters)
    "Ελληνικά αβγδε, русский текст",
    "\tindented with a tab; trailing spaces   ",
    "quotes \"double\" 'single' `back` and \\backslash\\",
    "symbols <>&{}[]()#%$@!?*+=|~^",
)


@cache
def mixed_text() -> bytes:
    """The 5,000-line text file ``docs/mixed-5000.txt``.

    Line ``n`` (1-based) starts with ``line nnnn:``. Every 7th line ends with ``\\r\\n``, the others
    with ``\\n``; every 50th line is empty apart from its ending; line 2500 is 3,000 characters
    long; line 1234 holds a form feed and line 4321 a U+2028 LINE SEPARATOR inside the line
    (GitLab splits lines on ``\\n`` only, like Ruby's ``String#lines``, so both stay inside their
    line; Python's ``str.splitlines`` would split there). 5,000 ``\\n`` bytes in all.
    """
    out: list[str] = []
    for n in range(1, MIXED_LINES + 1):
        if n % 50 == 0:
            body = ""
        elif n == 2500:
            body = f"line {n:04d}: " + ("long line " * 300)[: 3000 - 11]
        elif n == 1234:
            body = f"line {n:04d}: form\ffeed inside the line"
        elif n == 4321:
            body = f"line {n:04d}: line\u2028separator inside the line"
        else:
            body = f"line {n:04d}: {_SAMPLES[n % len(_SAMPLES)]}"
        out.append(body + ("\r\n" if n % 7 == 0 else "\n"))
    return "".join(out).encode("utf-8")


@cache
def ten_mib_text() -> bytes:
    """The 10 MiB file ``big/10mib.txt`` (see :data:`TEN_MIB_LINES`); built on first use.

    Zero-based line ``i`` (``i`` < 1,165,084) is ``f"L{i + 1:07d}"``, so lines 1,000,000 to
    1,000,500 (zero-based) read ``L1000001`` … ``L1000501``.
    """
    body = "".join(f"L{i:07d}\n" for i in range(1, TEN_MIB_LINES)) + "end\n"
    data = body.encode("ascii")
    assert len(data) == TEN_MIB, len(data)
    return data


@cache
def truncated_part() -> bytes:
    """What GitLab returns of ``logs/truncated.log``: its first :data:`TRUNCATED_RETURNED` bytes.

    The cut falls inside a line, so the returned text does not end with a newline.
    """
    line = "2026-01-15T09:00:00Z INFO request served path=/api/v4/projects status=200 duration_ms=12\n"
    full = (line * (TRUNCATED_RETURNED // len(line) + 2)).encode("ascii")
    return full[:TRUNCATED_RETURNED]


@cache
def one_long_line() -> bytes:
    """``dist/app.min.js``: one line of :data:`LONG_LINE_BYTES` bytes, no newline."""
    unit = b"function f(a){return a+1};"
    return (unit * (LONG_LINE_BYTES // len(unit) + 1))[:LONG_LINE_BYTES]


@cache
def png_bytes() -> bytes:
    """A valid 16x16 RGB PNG (binary: has NUL bytes and is not UTF-8)."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    width = height = 16
    # Each row: filter byte 0, then RGB triples.
    rows = b"".join(
        b"\0" + b"".join(bytes((x * 16, y * 16, 128)) for x in range(width)) for y in range(height)
    )
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


#: Size of the LFS object behind ``assets/model.bin`` (``rawSize``).
LFS_OBJECT_SIZE = 52_428_800
LFS_OID = hashlib.sha256(b"standin lfs object").hexdigest()


def lfs_pointer() -> bytes:
    """The Git LFS pointer committed as ``assets/model.bin``."""
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{LFS_OID}\nsize {LFS_OBJECT_SIZE}\n"
    ).encode("ascii")


NO_NEWLINE_TEXT = "first line\nsecond line\nlast line without a newline"
CRLF_TEXT = "windows line one\r\nwindows line two\r\nwindows line three\r\n"

CI_CONFIG = """\
spec:
  inputs:
    environment:
      description: Where to deploy
      default: staging
      options: [staging, production]
    dry_run:
      type: boolean
      default: false
---
stages: [build, test, deploy]

build:
  stage: build
  script: make build

rspec:
  stage: test
  script: bundle exec rspec

deploy:
  stage: deploy
  script: ./deploy.sh $[[ inputs.environment ]]
  when: manual
"""

#: ``broken-ci``'s configuration: a job without ``script``, GitLab refuses to create a pipeline.
BROKEN_CI_CONFIG = """\
stages: [test]

rspec:
  stage: test
  image: ruby:3.3
"""
#: The error GitLab reports for :data:`BROKEN_CI_CONFIG` (``Gitlab::Ci::Config::Entry::Job``).
BROKEN_CI_ERROR = "jobs:rspec config should implement the script:, run:, or trigger: keyword"
