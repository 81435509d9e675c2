"""What ships: the sdist and wheel built from this checkout, and a virtualenv with the wheel
installed as a user installs it (``pip install <wheel>``, dependencies resolved by pip).

The end-to-end tests start the gateway from that virtualenv (its console script
``gitlab-mcp-gateway``, from a folder outside the checkout), the packaging tests read the wheel
and the sdist, and the container test builds the image that ``pip install .`` makes: what the
suite verifies is what users run, never the source tree behind a ``sys.path`` entry.

``scripts/test`` builds it once per run (``python -m tests.shipped FOLDER``) and names the
folder in ``GATEWAY_TEST_SHIPPED``. A run started another way (plain ``pytest``) builds it on
first use into a folder of its own, once for all of pytest-xdist's workers (a file lock).
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The folder holding ``dist/`` and ``venv/``, made by ``python -m tests.shipped FOLDER``.
SHIPPED_ENV = "GATEWAY_TEST_SHIPPED"
#: Building and installing take seconds; a registry that does not answer must not hang the run.
INSTALL_TIMEOUT_SECONDS = 600
_DONE = ".complete"


@dataclass(frozen=True)
class Shipped:
    """The built distributions and the virtualenv the wheel is installed in."""

    folder: Path

    @property
    def wheel(self) -> Path:
        return _one(self.folder / "dist", "*.whl")

    @property
    def sdist(self) -> Path:
        return _one(self.folder / "dist", "*.tar.gz")

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"

    @property
    def console_script(self) -> Path:
        """``gitlab-mcp-gateway``, as ``[project.scripts]`` installs it."""
        return self.folder / "venv" / "bin" / "gitlab-mcp-gateway"


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise RuntimeError(f"expected one {pattern} in {folder}, found {[p.name for p in found]}")
    return found[0]


def _run(args: list[str], what: str, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(
        args,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_SECONDS,
        check=False,
    )
    if result.returncode != 0:
        output = result.stdout[-3000:] + result.stderr[-3000:]
        raise RuntimeError(f"{what} failed ({' '.join(args)}):\n{output}")


#: What a build reads: the Dockerfile's build context holds the same (and LICENSE).
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in", "gateway")


def _revision(checkout: Path) -> str:
    """The checkout's commit, as setup.py bakes it (the copy built from has no ``.git``)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def build(folder: Path, checkout: Path = REPO) -> Shipped:
    """Build the sdist and the wheel from ``checkout`` (this one by default; the benchmarks'
    comparison passes an older revision's tree) into ``folder/dist`` and install the wheel into a
    new virtualenv ``folder/venv``; anything already in ``folder`` is replaced."""
    if folder.exists():
        shutil.rmtree(folder)
    source, dist, venv = folder / "src", folder / "dist", folder / "venv"
    dist.mkdir(parents=True)
    source.mkdir()
    # A copy, as a fresh clone has it: setuptools reuses the file list of an egg-info folder left
    # by an earlier build in place, which would hide a file the packaging rules no longer name.
    for name in SOURCES:
        if (checkout / name).is_dir():
            shutil.copytree(
                checkout / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]")
            )
        elif (checkout / name).exists():
            shutil.copy2(checkout / name, source / name)
    # --no-isolation: the build backend pinned by the test extras (setuptools, wheel) instead of
    # a fresh download per run. The wheel is built from the sdist, so both must carry the files.
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        "building",
        env={**os.environ, "GATEWAY_REVISION": _revision(checkout)},
    )
    shipped = Shipped(folder)
    # pip installs into the new virtualenv from outside it (``--python``): the same install, without
    # unpacking a second pip into the virtualenv first, and run by this environment's newer pip,
    # whose resolver takes half the time of the one Python bundles.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "making the virtualenv")
    pip = [sys.executable, "-m", "pip", "--python", str(shipped.python), "--disable-pip-version-check"]
    _run([*pip, "--quiet", "install", str(shipped.wheel)], "installing the wheel")
    (folder / _DONE).touch()
    return shipped


@functools.cache
def shipped() -> Shipped:
    """The distributions and virtualenv of this run: ``GATEWAY_TEST_SHIPPED``'s when set, else
    built once for this run (every pytest-xdist worker of one run shares one build)."""
    named = os.environ.get(SHIPPED_ENV)
    if named:
        folder = Path(named)
        if not (folder / _DONE).is_file():
            raise RuntimeError(
                f"{SHIPPED_ENV}={named} holds no finished build: run `python -m tests.shipped {named}`"
            )
        return Shipped(folder)
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    folder = Path(tempfile.gettempdir()) / f"gateway-shipped-{run_id}"
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / _DONE).is_file():
            return Shipped(folder)
        return build(folder)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.shipped FOLDER  (makes the sdist, the wheel, a venv with the wheel)")
    built = build(Path(sys.argv[1]).resolve())
    print(built.folder)


if __name__ == "__main__":
    main()
