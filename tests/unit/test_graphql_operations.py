"""Every GraphQL document under ``gateway/`` is valid against GitLab's complete schema.

The schema is GitLab's published SDL kept in ``tests/gitlab/gitlab_schema.graphql`` (see the
README beside it), loaded unchanged with graphql-core. To check the documents against your own
GitLab's version too, write its schema with ``scripts/refresh-gitlab-schema`` and name the file in
``GITLAB_SCHEMA_FILE``: every document is then validated against both. Files are globbed, so an
operation a teammate adds is checked without touching this test. Each file holds exactly one named
operation (plus its fragments): the client sends that name as ``operationName``, and GitLab logs it.
"""

from __future__ import annotations

import os
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from graphql import (
    FragmentDefinitionNode,
    GraphQLSchema,
    OperationDefinitionNode,
    build_schema,
    parse,
    print_ast,
    validate,
)

from gateway.gitlab.operation_loader import OPERATIONS_DIR, load_operation, operation_name, snake_case
from tests.conftest import EXTRA_SCHEMA_ENV, GITLAB_SCHEMA, REPO
from tests.unit.gitlab.fake_gitlab import gitlab_schema

DOCUMENTS = sorted((REPO / "gateway").rglob("*.graphql"))


def schema_files() -> list[Path]:
    """The in-repository schema, then the one ``GITLAB_SCHEMA_FILE`` names, if any."""
    extra = os.environ.get(EXTRA_SCHEMA_ENV)
    return [GITLAB_SCHEMA, *([Path(extra)] if extra else [])]


@cache
def load(path: Path) -> GraphQLSchema:
    # The in-repository schema is built once per process and shared with the fake GitLab.
    return gitlab_schema() if path == GITLAB_SCHEMA else build_schema(path.read_text(encoding="utf-8"))


def document_errors(schema: GraphQLSchema, path: Path) -> list[str]:
    """``file:line:column: message`` for each way the document at ``path`` breaks ``schema``."""
    document = parse(path.read_text(encoding="utf-8"))  # a syntax error fails here, with its line
    return [
        f"{path.name}:{','.join(f'{loc.line}:{loc.column}' for loc in e.locations or [])}: {e.message}"
        for e in validate(schema, document)
    ]


def _operations(path: Path) -> list[OperationDefinitionNode]:
    return [
        d
        for d in parse(path.read_text(encoding="utf-8")).definitions
        if isinstance(d, OperationDefinitionNode)
    ]


def test_there_are_documents_to_check() -> None:
    assert OPERATIONS_DIR / "ci" / "get_pipeline.graphql" in DOCUMENTS
    assert OPERATIONS_DIR / "ci" / "pipeline_cancel.graphql" in DOCUMENTS


# The schema files are read at collection, before the autouse fixture clears GITLAB_* variables.
@pytest.mark.parametrize("schema_file", schema_files(), ids=lambda p: p.name)
@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_document_is_valid_against_gitlabs_schema(schema_file: Path, path: Path) -> None:
    errors = document_errors(load(schema_file), path)
    assert not errors, f"against {schema_file}:\n" + "\n".join(errors)


def test_a_schema_named_by_the_environment_is_checked_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another GitLab version: a copy of the in-repository schema without a field the gateway asks
    # for. Every other document validates against the copy; the one that uses the field is
    # reported, by file and line.
    sdl = GITLAB_SCHEMA.read_text(encoding="utf-8")
    field = sdl.index("\n  downstream(", sdl.index("\ntype Pipeline "))
    older = tmp_path / "older_gitlab_schema.graphql"
    older.write_text(sdl[:field] + sdl[sdl.index("\n", field + 1) :], encoding="utf-8")
    monkeypatch.setenv(EXTRA_SCHEMA_ENV, str(older))
    assert schema_files() == [GITLAB_SCHEMA, older]
    errors = {path.name: document_errors(load(older), path) for path in DOCUMENTS}
    assert {name for name, found in errors.items() if found} == {"get_pipeline.graphql"}
    assert all(
        "downstream" in e and e.startswith("get_pipeline.graphql:") for e in errors["get_pipeline.graphql"]
    )


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_operation_is_named_and_sent_whole_by_its_name(path: Path) -> None:
    operations = _operations(path)
    assert operations, f"{path.name}: no operation"
    assert path.parent.parent == OPERATIONS_DIR, (
        f"{path.name}: operations live in gateway/gitlab/operations/<domain>/"
    )
    for operation in operations:
        assert operation.name is not None, f"{path.name}: name every operation (it is sent as operationName)"
        name = snake_case(operation.name.value)
        assert load_operation(name) == path.read_text(encoding="utf-8")
        assert operation_name(name) == operation.name.value


def test_operation_names_are_unique() -> None:
    names = Counter(op.name.value for path in DOCUMENTS for op in _operations(path) if op.name)
    assert [name for name, count in names.items() if count > 1] == []


def test_a_fragment_copied_into_several_documents_is_the_same_everywhere() -> None:
    # Each document carries its own copy of the fragments it spreads (one document's field that a
    # GitLab lacks fails no other); the copies must not drift, or one save_pipeline action would
    # answer with other fields than the rest.
    copies: dict[str, set[str]] = {}
    for path in DOCUMENTS:
        for definition in parse(path.read_text()).definitions:
            if isinstance(definition, FragmentDefinitionNode):
                copies.setdefault(definition.name.value, set()).add(print_ast(definition))
    assert copies, "no fragment found: the documents changed, and so must this test"
    assert {name: len(texts) for name, texts in copies.items() if len(texts) > 1} == {}
