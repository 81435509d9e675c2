"""Every setting a message of the gateway names is a real one, spelt as the docs spell it.

The messages are the string literals of ``gateway/`` (configuration errors, command-line errors,
tool and JSON-RPC errors, log lines, the console's texts, help texts; docstrings are not shown
to anyone and are left out). In them, a dotted option (``broker.lease_seconds``), a
``GATEWAY_*`` or ``GITLAB_*`` variable and a ``--flag`` must each be one that exists: the
options and variables are derived from the settings models, the flags from the command lines'
``add_argument`` calls, so a renamed option fails here until every message that names it follows.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

import pytest
from pydantic import BaseModel

from gateway.cli.config_errors import OTHER_SERVERS_ENVIRONMENT
from gateway.config import CONTRACT_ENVIRONMENT, Settings
from tests.conftest import REPO

#: The settings' sections: the top-level fields that are tables of options.
SECTIONS: dict[str, type[BaseModel]] = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}
#: Every dotted option, as the docs and the example configuration name it.
OPTIONS = frozenset(
    f"{section}.{option}" for section, model in SECTIONS.items() for option in model.model_fields
)
#: Every variable the gateway reads: the contract's names, ``GATEWAY_<OPTION>`` and
#: ``GATEWAY_<SECTION>__<OPTION>``.
VARIABLES = frozenset(
    {*CONTRACT_ENVIRONMENT, *(f"GATEWAY_{name.upper()}" for name in Settings.model_fields)}
    | {f"GATEWAY_{option.upper().replace('.', '__')}" for option in OPTIONS}
)

_SECTION = "|".join(SECTIONS)
#: ``section.option`` not inside a longer dotted name (``gateway.broker.store``, ``gitlab.example.com``)
#: nor a path or a URL; ``section.prefix_*`` names a family of options.
_DOTTED = re.compile(rf"(?<![\w./@-])(?:{_SECTION})\.[a-z][a-z0-9_]*(?![\w(/-]|\.\w)")
_VARIABLE = re.compile(r"(?<![\w$])(?:GATEWAY|GITLAB)_[A-Z0-9_]*[A-Z0-9](?!\w)")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*[a-z]")
#: Files whose names look like options: ``docs/broker.md``, ``broker.db``, the console's assets.
_FILE_SUFFIXES = frozenset({"md", "py", "db", "lock", "js", "css", "com"})


def _messages() -> Iterator[tuple[str, int, str]]:
    """(file, line, text) of every string literal under ``gateway/`` but docstrings."""
    for path in sorted((REPO / "gateway").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                yield str(path.relative_to(REPO)), node.lineno, node.value


def _flags() -> frozenset[str]:
    """Every flag the gateway's command lines declare (``gitlab-mcp-gateway`` and its
    subcommands, ``python -m gateway.tools.docs``...): the ``--`` arguments of ``add_argument``;
    and those of the PostgreSQL client programs ``database backup|restore`` runs."""
    from gateway.cli.backup import PG_FLAGS

    flags: set[str] = set(PG_FLAGS)
    for path in (REPO / "gateway").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                flags.update(
                    arg.value
                    for arg in node.args
                    if isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and arg.value.startswith("--")
                )
    return frozenset(flags)


def _not_real(name: str) -> bool:
    if _VARIABLE.fullmatch(name):
        return name not in VARIABLES and name not in OTHER_SERVERS_ENVIRONMENT
    option = name.split(".", 1)[1]
    if option in _FILE_SUFFIXES:
        return False
    if option.endswith("_"):  # broker.retain_delivered_* names a family
        return not any(real.startswith(name) for real in OPTIONS)
    return name not in OPTIONS


def test_the_names_are_derived_from_the_models() -> None:
    assert {"broker.lease_seconds", "server.port", "console.operator_token"} <= OPTIONS
    assert {"GATEWAY_BROKER__LEASE_SECONDS", "GATEWAY_READ_ONLY", "GITLAB_TOKEN"} <= VARIABLES
    assert {"--port", "--read-only", "--json", "--pipeline"} <= _flags()


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ("raise server.prot", ["server.prot"]),
        ("set GATEWAY_SERVER_PORT=1", ["GATEWAY_SERVER_PORT"]),
        ("or GATEWAY_BROKER__LEASE_SECOND", ["GATEWAY_BROKER__LEASE_SECOND"]),
        ("broker.retain_deliver_* deleted", ["broker.retain_deliver_"]),
        ("see docs/broker.md, gateway.broker.store, https://gitlab.example.com, broker.db", []),
        ("set broker.lease_seconds (GATEWAY_BROKER__LEASE_SECONDS)", []),
    ],
)
def test_the_scan_finds_a_setting_that_does_not_exist(text: str, wrong: list[str]) -> None:
    found = [m.group() for pattern in (_DOTTED, _VARIABLE) for m in pattern.finditer(text)]
    assert [name for name in found if _not_real(name)] == wrong


def test_every_setting_a_message_names_exists() -> None:
    wrong = [
        f"{path}:{line}: {name}"
        for path, line, text in _messages()
        for pattern in (_DOTTED, _VARIABLE)
        for name in (m.group() for m in pattern.finditer(text))
        if _not_real(name)
    ]
    assert wrong == [], "messages name settings that do not exist (gateway/config/ has the real ones)"


def test_every_flag_a_message_names_exists() -> None:
    flags = _flags()
    wrong = [
        f"{path}:{line}: {m.group()}"
        for path, line, text in _messages()
        for m in _FLAG.finditer(text)
        if m.group() not in flags
    ]
    assert wrong == [], "messages name flags the command line does not have"


def test_the_example_configuration_names_only_real_options() -> None:
    """The example configuration is what ``--example-config`` prints and the docs point to: its
    tables and options are the models', and so are the variables its comments name."""
    text = (REPO / "gateway" / "config_example.toml").read_text(encoding="utf-8")
    section = ""
    wrong = []
    for number, line in enumerate(text.splitlines(), 1):
        uncommented = line.lstrip("# ").rstrip()
        if header := re.fullmatch(r"\[([a-z_]+)\]", uncommented):
            section = header.group(1)
            if section not in SECTIONS:
                wrong.append(f"{number}: [{section}]")
        elif (option := re.match(r"([a-z_]+) = ", uncommented)) and section:
            named = f"{section}.{option.group(1)}"
            wrong.extend([f"{number}: {named}"] if named not in OPTIONS else [])
        wrong.extend(f"{number}: {m.group()}" for m in _VARIABLE.finditer(line) if _not_real(m.group()))
    assert wrong == []


def test_the_docs_name_only_real_settings() -> None:
    """The README and docs/ name options and ``GATEWAY_*`` variables as the models do (other
    ``GITLAB_*`` variables are GitLab CI's and the tests' own)."""
    # What a misspelt option gets, shown; a client's own variable for its token, read by the
    # client (``${GATEWAY_CLIENT_TOKEN}``); the fields of /readyz's answer; the build's revision
    # (setup.py reads it when the package is built, never the gateway).
    others = {"server.prot", "GATEWAY_CLIENT_TOKEN", "gitlab.state", "gitlab.reachable", "GATEWAY_REVISION"}
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    wrong = [
        f"{path.relative_to(REPO)}:{number}: {name}"
        for path in docs
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for pattern in (_DOTTED, _VARIABLE)
        for name in (m.group() for m in pattern.finditer(line))
        if _not_real(name) and name not in others and not name.startswith("GITLAB_")
    ]
    assert wrong == []
