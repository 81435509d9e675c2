"""Each GitLab band's schema builds, is valid, and has exactly the coordinates declared for it.

The bands' schemas are the newest GitLab EE schema minus what :mod:`tests.gitlab.versions`
declares later or EE-only (:mod:`tests.gitlab.band_schema`); the stand-in serves them.
"""

from __future__ import annotations

import pytest
from graphql import GraphQLEnumType, GraphQLInputObjectType, GraphQLSchema, parse, validate, validate_schema

from tests.gitlab import versions
from tests.gitlab.band_schema import _parse, schema_for

BANDS = [pytest.param(v, e, id=versions.band_id(v, e)) for v, e in versions.BANDS]


def has_coordinate(schema: GraphQLSchema, coordinate: str) -> bool:
    """Whether ``schema`` has ``Type``, ``Type.field``, ``Type.field(arg:)`` or ``Enum.VALUE``."""
    type_name, member, arg = _parse(coordinate)
    gql_type = schema.type_map.get(type_name)
    if gql_type is None or member is None:
        return gql_type is not None
    if isinstance(gql_type, GraphQLEnumType):
        return member in gql_type.values
    fields = getattr(gql_type, "fields", {})
    if member not in fields:
        return False
    return arg is None or (not isinstance(gql_type, GraphQLInputObjectType) and arg in fields[member].args)


@pytest.mark.parametrize(("version", "edition"), BANDS)
def test_band_schema_is_valid_and_has_what_its_version_has(version: str, edition: versions.Edition) -> None:
    schema = schema_for(version, edition)
    assert validate_schema(schema) == []
    for arrival in versions.ARRIVALS:
        expected = versions.has(arrival, version, edition)
        assert has_coordinate(schema, arrival.coordinate) is expected, (arrival, version, edition)
    if edition == "ce":
        assert not any(name.startswith(("DuoWorkflow", "AiDuoWorkflow")) for name in schema.type_map)
        assert "duoWorkflowWorkflows" not in schema.query_type.fields  # type: ignore[union-attr]
    # What every band has: the queries every tool sends somewhere.
    assert has_coordinate(schema, "Project.pipeline(iid:)")
    assert has_coordinate(schema, "CiJobStatus.CANCELING")
    assert has_coordinate(schema, "Metadata.enterprise")


def test_a_band_refuses_what_its_version_lacks() -> None:
    old = schema_for("16.11", "ee")
    document = parse('{ project(fullPath: "a") { pipeline(id: "gid://gitlab/Ci::Pipeline/1") { id } } }')
    assert [e.message for e in validate(old, document)] == [
        "Unknown argument 'id' on field 'Project.pipeline'. Did you mean 'iid'?"
    ]


def test_newest_band_is_the_schema_file_unchanged() -> None:
    assert versions.missing(versions.NEWEST, "ee") == []
    assert versions.BANDS[-1] == (versions.NEWEST, "ee")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("17.11", (17, 11)), ("17.11.3-ee", (17, 11)), ("19.4.0-pre", (19, 4)), ("16.11.10", (16, 11))],
)
def test_parse_version(text: str, parsed: tuple[int, int]) -> None:
    assert versions.parse_version(text) == parsed


def test_parse_version_refuses_what_is_not_a_version() -> None:
    with pytest.raises(ValueError, match="not a GitLab version: 'latest'"):
        versions.parse_version("latest")


def test_artifacts_tree_route_arrived_in_18_8() -> None:
    route = "GET /projects/:id/jobs/:job_id/artifacts/tree"
    assert not versions.has_route(route, "18.5")
    assert versions.has_route(route, "18.8")
    assert versions.has_route("GET /projects/:id/jobs/:job_id", "16.11")
