"""The layers point one way (docs/CONTRIBUTING.md): the ``[tool.importlinter]`` contracts of
pyproject.toml hold. They say that the MCP protocol core imports no aiohttp and nothing of its
HTTP transport, that ``gateway.observability`` imports nothing above it, that the layers point
one way (only the command line imports the composition, ``gateway.server``), and that no import
in ``gateway/`` is circular. Imports under ``if TYPE_CHECKING:`` and inside functions count.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
import importlinter.api  # noqa: F401  (configures import-linter, as its command line does)
import pytest
from importlinter.application.use_cases import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """What ``lint-imports`` says, in this process (no cache written into the checkout). Not
    through ``importlinter.cli``: it configures logging with ``dictConfig``, which disables every
    logger that exists (the gateway's), and the log tests this worker runs later see nothing."""
    passed = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    shown = capsys.readouterr().out
    assert passed, shown
    assert "0 broken" in shown


def test_the_contracts_see_type_only_imports_and_imports_inside_functions() -> None:
    """The graph the contracts are checked on (grimp's, as import-linter builds it) has the
    imports the gateway makes lazily or for type checking only."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert options["exclude_type_checking_imports"] is False
    graph = grimp.build_graph("gateway", exclude_type_checking_imports=False, cache_dir=None)
    # Under `if TYPE_CHECKING:`.
    assert graph.direct_import_exists(importer="gateway.tools.context", imported="gateway.broker.service")
    # Inside main().
    assert graph.direct_import_exists(importer="gateway.__main__", imported="gateway.server.serve")


def test_no_benchmark_module_imports_itself_back() -> None:
    """bench/ is code we keep too: no module of it reaches itself through its imports (the
    command line, ``bench.__main__``, imports the comparison; nothing imports the command line)."""
    graph = grimp.build_graph("bench", exclude_type_checking_imports=False, cache_dir=None)
    ours = {m for m in graph.modules if m == "bench" or m.startswith("bench.")}
    cycles = sorted(
        (importer, imported)
        for importer in ours
        for imported in graph.find_modules_directly_imported_by(importer) & ours
        if graph.chain_exists(importer=imported, imported=importer)
    )
    assert cycles == [], cycles
    assert not any("bench.__main__" in graph.find_modules_directly_imported_by(m) for m in ours)
