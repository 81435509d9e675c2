"""The project stands on its own: no file points at notes that only its authors had.

A clone from a public forge has nothing beside it, so no file may need a sibling folder, cite the
private notes the project was written from, or name the internal documents (and tracker numbers)
they came as. Sources are GitLab's and MCP's public pages, or files of this repository.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GITLAB_SCHEMA, REPO

FORBIDDEN = re.compile(
    r"\.\./shared"  # a folder beside the checkout
    r"""|["']shared["']\s*[/,)]"""  # ... or the same joined as a path
    r"|\bshared/(?:spec|gitlab|seeds|hooks)\b"  # the notes the project was written from
    r"|\bseed[ -]?0\d\d\b|\bseeds? 0\d\d\b|\b\d{3}_[0-9a-f]{16}\.txt\b"  # their documents, by number or file
    r"|\bthe seed(?:'s)?\b(?! data)"  # ... or by what they were called (the stand-in's "seed data" is data)
    r"|\bissues? #?\d+\b",  # tracker numbers a reader cannot open
    re.IGNORECASE,
)


def project_files() -> list[Path]:
    """Every file of the checkout that git would track (new ones too), or all files without git."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO, capture_output=True, check=True, timeout=30,
        ).stdout.decode().split("\0")  # fmt: skip
        paths = [REPO / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", ".tools", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
        paths = [p for p in REPO.rglob("*") if not skip.intersection(p.relative_to(REPO).parts)]
    return [p for p in paths if p.is_file() and p not in (GITLAB_SCHEMA, Path(__file__))]


@pytest.mark.spawns_process(reason="asks git for the files it would track (git ls-files)")
def test_no_file_names_the_authors_notes() -> None:
    hits = []
    for path in project_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            if match := FORBIDDEN.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {match.group(0)!r} in {line.strip()[:100]}")
    assert hits == [], "cite public sources instead:\n" + "\n".join(hits)


def test_the_check_would_catch_each_kind() -> None:
    for line in (
        "read ../" + "shared/" + "gitlab/x",  # split so that this file does not match itself
        'REPO.parent / "shared" / "gitlab"',
        "see shared/" + "spec/design.md",
        "(seed " + "000)",
        "the seed-004 URL",
        "restating 003_36619a0b57b5c62f.txt",
        "as the seed asks",
        "issue 5 point 6",
    ):
        assert FORBIDDEN.search(line), line
    assert not FORBIDDEN.search("the stand-in's seed data")
