"""The layers point one way (docs/CONTRIBUTING.md): every ``import`` in ``gateway/``, read from
the source, stays within what its layer may use.

From the top: ``gateway.__main__`` (the command line) → ``gateway.server`` (the composition:
app factory, services, health, metrics listener) → ``gateway.mcp`` (the transport) →
``gateway.tools`` → ``gateway.gitlab``, ``gateway.broker``, ``gateway.cache`` →
``gateway.observability``, ``gateway.config``, ``gateway.errors``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gateway"

#: What ``gateway.observability`` (metrics, logs, redaction, the probe) may import from the
#: gateway: everything else imports it, so it imports nothing above it.
OBSERVABILITY_MAY_IMPORT = ("gateway", "gateway.config", "gateway.errors", "gateway.observability")

#: Layer → the layers above it, which it must not import (not even for type checking).
ABOVE = {
    "gateway.mcp": ("gateway.server",),
    "gateway.tools": ("gateway.server", "gateway.mcp"),
    "gateway.gitlab": ("gateway.server", "gateway.mcp", "gateway.tools", "gateway.broker"),
    "gateway.broker": ("gateway.server", "gateway.mcp", "gateway.tools", "gateway.gitlab"),
    "gateway.cache": ("gateway.server", "gateway.mcp", "gateway.tools", "gateway.broker"),
}


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """``(line, module, names it may import)`` of every import in ``path``, relative ones resolved,
    wherever they stand (inside functions and ``if TYPE_CHECKING:`` too). ``from a import b``
    may import the module ``a.b``: both are among the names."""
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, (alias.name,)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.append((node.lineno, name, (name, *(f"{name}.{alias.name}" for alias in node.names))))
    return found


def _within(name: str, layer: str) -> bool:
    return name == layer or name.startswith(layer + ".")


def _sources(layer: str) -> list[Path]:
    folder = PACKAGE.joinpath(*layer.split(".")[1:])
    return sorted(folder.rglob("*.py")) if folder.is_dir() else [folder.with_suffix(".py")]


def _offences(paths: list[Path], forbidden: Callable[[str], bool]) -> list[str]:
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in paths
        for line, module, names in _imports(path)
        if any(forbidden(name) for name in names)
    ]


def _above(layers: tuple[str, ...]) -> Callable[[str], bool]:
    return lambda name: any(_within(name, layer) for layer in layers)


def _not_below_observability(name: str) -> bool:
    # `from gateway import __version__` names an attribute of the package, not a module.
    if not _within(name, "gateway") or name in ("gateway", "gateway.__version__"):
        return False
    return not any(_within(name, low) for low in OBSERVABILITY_MAY_IMPORT if low != "gateway")


def test_observability_imports_nothing_above_it() -> None:
    offences = _offences(_sources("gateway.observability"), _not_below_observability)
    may = ", ".join(OBSERVABILITY_MAY_IMPORT)
    assert not offences, f"gateway.observability may import only {may} from the gateway:\n" + "\n".join(
        offences
    )


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_a_layer_imports_none_above_it(layer: str) -> None:
    offences = _offences(_sources(layer), _above(ABOVE[layer]))
    assert not offences, f"{layer} must not import {', '.join(ABOVE[layer])}:\n" + "\n".join(offences)


def test_only_the_command_line_imports_the_composition_layer() -> None:
    """Nothing imports the app factory (or its services, health, listener) back."""
    others = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if not _within(_module_of(path), "gateway.server") and _module_of(path) != "gateway.__main__"
    ]
    offences = _offences(others, _above(("gateway.server",)))
    assert not offences, "only gateway/__main__.py imports gateway.server:\n" + "\n".join(offences)


def test_the_rules_see_imports_inside_functions_and_type_checking_blocks() -> None:
    """The walk is not fooled by the places the gateway puts its lazy imports."""
    source = PACKAGE / "__main__.py"
    names = {module for _, module, _ in _imports(source)}
    assert "gateway.server.app" in names  # imported inside main()
    assert "gateway.config" in names  # imported under `if TYPE_CHECKING:`
