"""Bakes the git revision a build is made from into the package, as ``gateway/REVISION``.

Everything else is in pyproject.toml; this file only adds that step to setuptools' own commands
(https://setuptools.pypa.io/en/latest/userguide/extension.html). The revision is, first found:
the ``GATEWAY_REVISION`` environment variable (the container build passes it as a build
argument, since the image's build context has no ``.git``); the checkout's commit (``git
rev-parse``, ``+dirty`` when tracked files differ from it) when this folder is the top of a git
work tree; the ``gateway/REVISION`` an sdist carries (an sdist made from a checkout bakes it, so
a wheel built from the sdist has it too); else ``unknown``. ``gateway.REVISION`` reads it at run
time (``gateway_build_info{revision}``, ``--version``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
REVISION_FILE = Path("gateway") / "REVISION"


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(  # noqa: S603 - git on PATH, as any build from a checkout runs it
            ["git", "-C", str(ROOT), *args],  # noqa: S607
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def revision() -> str:
    """The revision to bake in: see the module docstring."""
    given = os.environ.get("GATEWAY_REVISION", "").strip()
    if given:
        return given
    top = _git("rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == ROOT:
        commit = _git("rev-parse", "--short=12", "HEAD")
        if commit:
            return commit + ("+dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")
    carried = ROOT / REVISION_FILE
    if carried.is_file() and carried.read_text().strip():
        return carried.read_text().strip()
    return "unknown"


def _write(target: Path, text: str) -> None:
    # The sdist's tree holds hard links to the sources: never write through one.
    target.unlink(missing_ok=True)
    target.write_text(text + "\n")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            _write(Path(self.build_lib) / REVISION_FILE, revision())


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        _write(Path(base_dir) / REVISION_FILE, revision())


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
