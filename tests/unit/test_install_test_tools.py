"""``scripts/test`` installs only what the tests it runs need: ``scripts/install-test-tools --for``
maps pytest's arguments to groups of tools (the rule is in that script's header)."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.spawns_process(reason="runs scripts/install-test-tools as scripts/test does")

SCRIPT = REPO / "scripts" / "install-test-tools"
EVERYTHING = ["browser", "node", "podman", "postgres", "prometheus"]


def groups_for(*args: str) -> list[str]:
    done = subprocess.run(
        [str(SCRIPT), "--groups-for", *args], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(
    ("args", "groups"),
    [
        ((), EVERYTHING),  # the whole suite
        (("-q", "-k", "unit", "-p", "no:cacheprovider"), EVERYTHING),  # options select no path
        (("tests",), EVERYTHING),
        (("tests/unit", "-q"), ["postgres", "prometheus"]),
        (
            ("tests/unit/test_config.py::test_toolsets_take_a_comma_list_and_refuse_unknown_names",),
            ["postgres", "prometheus"],
        ),
        ((str(REPO / "tests" / "unit" / "broker"),), ["postgres", "prometheus"]),
        (("tests/container",), ["podman"]),
        (("./tests/e2e/test_examples.py",), ["browser", "node", "postgres", "prometheus"]),
        (("tests/e2e", "tests/container"), EVERYTHING),
    ],
)
def test_the_tools_installed_follow_the_tests_selected(args: tuple[str, ...], groups: list[str]) -> None:
    assert groups_for(*args) == groups


def test_scripts_test_passes_its_arguments() -> None:
    assert 'scripts/install-test-tools --for "$@"' in (REPO / "scripts" / "test").read_text()


def test_an_unknown_group_is_refused() -> None:
    done = subprocess.run([str(SCRIPT), "postgresql"], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "no group 'postgresql': choose from node prometheus podman postgres browser" in done.stderr
