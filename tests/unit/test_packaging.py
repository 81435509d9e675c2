"""What ships carries what the gateway reads at run time.

The sdist and the wheel are built from the checkout once per run (:mod:`tests.shipped`, shared
with the end-to-end tests that run the installed wheel); these tests open them. A file under
``gateway/`` left out of the wheel (a GraphQL document, a migration, a page of the console) would
make every tool that reads it fail for users while the tests that import the tree pass, as
``gitlab/operations/*.graphql`` once did when the documents moved one folder down.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import gateway
from gateway.tools import all_tools
from tests.conftest import REPO
from tests.e2e.every_tool import HAPPY
from tests.shipped import Shipped, shipped

pytestmark = pytest.mark.spawns_process(
    reason="builds the sdist and the wheel (once per run, shared with the end-to-end tests) and runs twine"
)

_PACKAGE_DATA_HINT = (
    "MANIFEST.in's `graft gateway` (read through pyproject's `include-package-data`) puts every file "
    "under gateway/ into the sdist and the wheel: check it is there and the file is not excluded."
)


def _tree_files() -> set[str]:
    """Every file under ``gateway/`` the gateway may read: the tree less bytecode caches."""
    return {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "gateway").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".pyc", ".pyo"}
    }


@pytest.fixture(scope="module")
def dist() -> Shipped:
    return shipped()


def test_the_wheel_carries_every_file_under_gateway(dist: Shipped) -> None:
    with zipfile.ZipFile(dist.wheel) as wheel:
        carried = set(wheel.namelist())
    missing = sorted(_tree_files() - carried)
    assert not missing, f"the wheel {dist.wheel.name} lacks {', '.join(missing)}. {_PACKAGE_DATA_HINT}"


def test_the_sdist_carries_every_file_under_gateway(dist: Shipped) -> None:
    with tarfile.open(dist.sdist) as sdist:
        root = sdist.getnames()[0].split("/")[0]
        carried = {name.removeprefix(f"{root}/") for name in sdist.getnames()}
    missing = sorted(_tree_files() - carried)
    assert not missing, f"the sdist {dist.sdist.name} lacks {', '.join(missing)}. {_PACKAGE_DATA_HINT}"


def test_twine_check_passes_on_the_wheel_and_the_sdist(dist: Shipped) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist.wheel), str(dist.sdist)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_build_names_the_git_revision_it_was_made_from(dist: Shipped, tmp_path: Path) -> None:
    """setup.py bakes the revision into the sdist, and the wheel (built from the sdist, where there
    is no .git) carries it on: gateway_build_info{revision} and --version name it."""
    with tarfile.open(dist.sdist) as sdist:
        member = next(m for m in sdist.getmembers() if m.name.endswith("/gateway/REVISION"))
        extracted = sdist.extractfile(member)
        assert extracted is not None
        in_sdist = extracted.read().decode().strip()
    with zipfile.ZipFile(dist.wheel) as wheel:
        in_wheel = wheel.read("gateway/REVISION").decode().strip()
    assert in_sdist == in_wheel and re.fullmatch(r"[0-9a-f]{12}(\+dirty)?", in_wheel), (in_sdist, in_wheel)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert in_wheel.startswith(commit)
    shown = subprocess.run(
        [str(dist.console_script), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert shown.strip() == f"gitlab-mcp-gateway {gateway.__version__} (revision {in_wheel})"


def test_the_version_lives_in_gateway_init_alone(dist: Shipped) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    with zipfile.ZipFile(dist.wheel) as wheel:
        metadata_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(wheel.read(metadata_name).decode())
    assert metadata["Version"] == gateway.__version__
    # The image's label and the deployment examples' image tags name the same release.
    label = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', (REPO / "Dockerfile").read_text())
    assert label is not None and label.group(1) == gateway.__version__
    tags = {
        (path.relative_to(REPO).as_posix(), tag)
        for path in [*(REPO / "deploy").rglob("*.yaml"), REPO / "Dockerfile", REPO / "docs" / "operations.md"]
        for tag in re.findall(r"gitlab-mcp-gateway:(\d+\.\d+\.\d+)", path.read_text())
    }
    assert tags and all(tag == gateway.__version__ for _, tag in tags), sorted(tags)


def test_every_gitlab_tool_has_a_happy_call() -> None:
    """The end-to-end and container tests call every GitLab tool from ``every_tool.HAPPY``."""
    gitlab_tools = {tool.name for tool in all_tools() if tool.toolset != "broker"}
    missing = sorted(gitlab_tools - set(HAPPY))
    assert not missing, f"add a successful call of {missing} to tests/e2e/every_tool.py's HAPPY"
    assert set(HAPPY) <= gitlab_tools, sorted(set(HAPPY) - gitlab_tools)


def test_the_shipped_virtualenv_runs_the_installed_gateway_not_the_tree(
    dist: Shipped, tmp_path: Path
) -> None:
    result = subprocess.run(
        [str(dist.python), "-c", "import gateway; print(gateway.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "site-packages" in result.stdout and str(REPO / "gateway") not in result.stdout, result.stdout
