"""Each GitLab band's schema builds, is valid, and has exactly the coordinates declared for it.

The bands' schemas are the newest GitLab EE schema minus what :mod:`tests.gitlab.versions`
declares later or EE-only (:mod:`tests.gitlab.band_schema`); the stand-in serves them.
"""

from __future__ import annotations

from typing import Any

import pytest
from graphql import parse, validate, validate_schema

from tests.gitlab import versions
from tests.gitlab.band_schema import _parse, band_introspection, schema_for

BANDS = [pytest.param(v, e, id=versions.band_id(v, e)) for v, e in versions.BANDS]


def has_coordinate(data: dict[str, Any], coordinate: str) -> bool:
    """Whether introspection ``data`` has ``Type``, ``Type.field``, ``Type.field(arg:)`` or ``Enum.VALUE``."""
    type_name, member, arg = _parse(coordinate)
    found = next((t for t in data["__schema"]["types"] if t["name"] == type_name), None)
    if found is None or member is None:
        return found is not None
    members = (found.get("fields") or []) + (found.get("inputFields") or []) + (found.get("enumValues") or [])
    hit = next((m for m in members if m["name"] == member), None)
    if hit is None or arg is None:
        return hit is not None
    return any(a["name"] == arg for a in hit.get("args") or [])


@pytest.mark.parametrize(("version", "edition"), BANDS)
def test_band_has_what_its_version_has(version: str, edition: versions.Edition) -> None:
    data = band_introspection(version, edition)
    for arrival in versions.ARRIVALS:
        expected = versions.has(arrival, version, edition)
        assert has_coordinate(data, arrival.coordinate) is expected, (arrival, version, edition)
    names = {t["name"] for t in data["__schema"]["types"]}
    if edition == "ce":
        assert not any(name.startswith(("DuoWorkflow", "AiDuoWorkflow")) for name in names)
    # What every band has: what every tool can send somewhere.
    assert has_coordinate(data, "Project.pipeline(iid:)")
    assert has_coordinate(data, "CiJobStatus.CANCELING")
    assert has_coordinate(data, "Metadata.enterprise")


# Building a schema costs a second or two: the two bands that remove the most are built here; the
# band-matrix stand-ins build (and validate) every band's.
@pytest.mark.parametrize(("version", "edition"), [("16.11", "ee"), ("17.11", "ce")])
def test_band_schema_builds_and_is_valid(version: str, edition: versions.Edition) -> None:
    schema = schema_for(version, edition)
    assert validate_schema(schema) == []
    assert "duoWorkflowWorkflows" not in schema.query_type.fields  # type: ignore[union-attr]


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


def test_a_test_that_reads_no_arriving_coordinate_runs_on_the_oldest_and_newest_band() -> None:
    assert versions.telling_bands() == [versions.BANDS[0], versions.BANDS[-1]]


def test_telling_bands_keep_both_ends_of_each_group_of_alike_bands() -> None:
    # exitCode (17.9) splits the bands in two: 16.11…17.8 and 17.11…19.4 (CE alike: not EE-only).
    assert versions.telling_bands(("CiJob.exitCode",)) == [
        ("16.11", "ee"),
        ("17.8", "ee"),
        ("17.11", "ee"),
        (versions.NEWEST, "ee"),
    ]
    # An EE-only coordinate sets CE apart; the artifacts tree route (18.8) splits 18.5 | 18.8.
    assert ("17.11", "ce") in versions.telling_bands(("Project.duoContextExclusionSettings",))
    assert versions.telling_bands(routes=("GET /projects/:id/jobs/:job_id/artifacts/tree",)) == [
        ("16.11", "ee"),
        ("18.5", "ee"),
        ("18.8", "ee"),
        (versions.NEWEST, "ee"),
    ]


def test_telling_bands_refuses_what_versions_does_not_declare() -> None:
    with pytest.raises(KeyError, match=r"Project\.nothing"):
        versions.telling_bands(("Project.nothing",))
    with pytest.raises(KeyError):
        versions.telling_bands(routes=("GET /nothing",))
