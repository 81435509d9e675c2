"""The gateway of a git revision and of the working tree, each built as its wheel and installed
from it, for ``python -m bench compare``.

Each build's wheel is installed without its dependencies into a folder of its own
(``pip install --no-deps --target``) and run as ``python -m gateway`` by a virtualenv that holds
the dependencies, with that folder first on ``PYTHONPATH``: the installed package is what the
wheel carries, exactly as ``pip install <wheel>`` lays it out, while the dependencies (minutes to
resolve and install on a small machine) are installed once per distinct dependency list and
Python, and kept in the cache folder (``$XDG_CACHE_HOME/gitlab-mcp-gateway/bench-builds``, by
default under ``~/.cache``; safe to delete, it is made again). A revision's installed wheel is
kept there too (by commit and Python), so only the working tree is built on every run (about
20 s). Both builds run on the Python that runs the benchmark.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bench.rig import cache_root
from tests.shipped import SOURCES

REPO = Path(__file__).resolve().parents[1]
_DONE = ".complete"


@dataclass(frozen=True)
class Build:
    """One installed build: what to run and with which ``PYTHONPATH``."""

    label: str
    python: Path
    site: Path

    @property
    def command(self) -> list[str]:
        return [str(self.python), "-m", "gateway"]

    @property
    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.site)}


def cache_dir() -> Path:
    return cache_root() / "bench-builds"


def _run(args: list[str], what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(
        args, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(args)}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def resolve(rev: str) -> str:
    """The full commit id of ``rev``."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"--base {rev!r} is not a commit of {REPO}: {done.stderr.strip()}")
    return done.stdout.strip()


def _tree_of(commit: str, dest: Path) -> None:
    """The files of ``commit``, as a fresh clone has them."""
    archive = dest.with_suffix(".tar")
    _run(["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), commit], "git archive")
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()


def _tree_of_work(dest: Path) -> None:
    """The working tree's files a build reads (uncommitted changes included)."""
    dest.mkdir(parents=True)
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]")
            )
        elif (REPO / name).exists():
            shutil.copy2(REPO / name, dest / name)


def _dependencies(tree: Path) -> str:
    """The key of the dependencies' virtualenv: the dependency list and the Python that runs the
    benchmark (the virtualenv is made with it, and both builds must run on the Python it names)."""
    with (tree / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    key = "\n".join([_PYTHON, *project["dependencies"]])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


_PYTHON = f"{sys.executable}\n{sys.version}"


def _install(tree: Path, site: Path, label: str) -> Build:
    """Build ``tree``'s wheel, install it into ``site`` and return the build; the dependencies'
    virtualenv is made on first use of its dependency list."""
    with tempfile.TemporaryDirectory(prefix="bench-wheel-") as tmp:
        dist = Path(tmp)
        _run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(tree)],
            "build",
        )
        (wheel,) = dist.glob("*.whl")
        venv = cache_dir() / f"deps-{_dependencies(tree)}"
        python = venv / "bin" / "python"
        pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check", "--quiet"]
        if not (venv / _DONE).is_file():
            print(
                f"installing the dependencies of {label} into {venv} (once per dependency list)", flush=True
            )
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "making the virtualenv")
            _run([*pip, "install", str(wheel)], "installing the dependencies")
            (venv / _DONE).touch()
        shutil.rmtree(site, ignore_errors=True)
        _run(
            [*pip, "install", "--no-deps", "--no-compile", "--target", str(site), str(wheel)],
            "installing the wheel",
        )
    (site / "tree-deps").write_text(_dependencies(tree))
    (site / _DONE).touch()
    return Build(label, python, site)


def build_revision(rev: str) -> Build:
    """The gateway at ``rev``, its installed wheel kept in the cache folder by commit."""
    commit = resolve(rev)
    label = f"{rev} ({commit[:9]})" if not commit.startswith(rev) else commit[:9]
    site = cache_dir() / f"rev-{commit}-{hashlib.sha256(_PYTHON.encode()).hexdigest()[:8]}"
    if (site / _DONE).is_file():
        with (site / "tree-deps").open() as f:
            venv = cache_dir() / f"deps-{f.read().strip()}"
        if (venv / _DONE).is_file():
            return Build(label, venv / "bin" / "python", site)
    with tempfile.TemporaryDirectory(prefix="bench-rev-") as tmp:
        tree = Path(tmp) / "tree"
        _tree_of(commit, tree)
        return _install(tree, site, label)


def build_working_tree(folder: Path) -> Build:
    """The gateway of the working tree, installed into ``folder`` (built on every run)."""
    with tempfile.TemporaryDirectory(prefix="bench-work-") as tmp:
        tree = Path(tmp) / "tree"
        _tree_of_work(tree)
        return _install(tree, folder, "working tree")
