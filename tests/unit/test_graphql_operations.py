"""Every GraphQL document under ``gateway/`` is valid against GitLab's complete schema.

The schema is ``shared/gitlab/gitlab_schema.graphql`` (gitlab.com 19.4, ``shared/spec/gitlab_facts.md``
§4), loaded unchanged with graphql-core. Files are globbed, so an operation a teammate adds is
checked without touching this test. Each file holds exactly one named operation (plus its
fragments): the client sends that name as ``operationName``, and GitLab logs it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from graphql import GraphQLSchema, OperationDefinitionNode, parse, validate

from gateway.gitlab.operation_loader import OPERATIONS_DIR, load_operation, operation_name
from tests.conftest import REPO
from tests.unit.gitlab.fake_gitlab import gitlab_schema

DOCUMENTS = sorted((REPO / "gateway").rglob("*.graphql"))


@pytest.fixture(scope="module")
def schema() -> GraphQLSchema:
    return gitlab_schema()  # built once per process, shared with the fake GitLab of the tool tests


def _operations(path: Path) -> list[OperationDefinitionNode]:
    return [
        d
        for d in parse(path.read_text(encoding="utf-8")).definitions
        if isinstance(d, OperationDefinitionNode)
    ]


def test_there_are_documents_to_check() -> None:
    assert OPERATIONS_DIR / "get_pipeline.graphql" in DOCUMENTS


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_document_is_valid_against_gitlabs_schema(schema: GraphQLSchema, path: Path) -> None:
    document = parse(path.read_text(encoding="utf-8"))  # a syntax error fails here, with its line
    errors = validate(schema, document)
    assert not errors, "\n".join(
        f"{path.name}:{','.join(f'{loc.line}:{loc.column}' for loc in e.locations or [])}: {e.message}"
        for e in errors
    )


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_document_holds_one_named_operation_the_client_sends_by_name(path: Path) -> None:
    operations = _operations(path)
    assert len(operations) == 1, f"{path.name}: one operation per file, found {len(operations)}"
    assert operations[0].name is not None, f"{path.name}: name the operation (it is sent as operationName)"
    assert path.parent == OPERATIONS_DIR, f"{path.name}: operations live in gateway/gitlab/operations/"
    assert load_operation(path.stem) == path.read_text(encoding="utf-8")
    assert operation_name(path.stem) == operations[0].name.value


def test_operation_names_are_unique() -> None:
    names = Counter(op.name.value for path in DOCUMENTS for op in _operations(path) if op.name)
    assert [name for name, count in names.items() if count > 1] == []
