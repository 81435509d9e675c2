"""Every document the gateway can send to a GitLab band is valid against that band's schema, and
what it refuses there is what that band lacks.

The bands (``tests/gitlab/versions.py``: the oldest supported, the upgrade stops, the newest, EE
and CE) are GitLab's newest schema minus what arrived later or is EE-only
(``tests/gitlab/band_schema.py``). For each operation a tool declares, the gateway's choice for
that band (``gateway.gitlab.needs``) is either a document, which must validate, or a refusal,
which must be needed: the newest document is invalid there.
"""

from __future__ import annotations

from typing import Any

import pytest
from graphql import parse, validate

from gateway.gitlab.instance import InstanceInfo
from gateway.gitlab.operation import Operation
from gateway.gitlab.operation_loader import load_operation
from gateway.tools import all_tools
from tests.gitlab import versions
from tests.gitlab.band_schema import schema_for

#: Every band of the matrix, and CE at the oldest and the newest version (each band's schema costs
#: about a second to build, so one test per band checks every operation).
BANDS = sorted({*versions.BANDS, (versions.OLDEST, "ce"), (versions.NEWEST, "ce")})
OPERATIONS: dict[str, Operation[Any]] = {op.name: op for tool in all_tools() for op in tool.operations}


def info_of(version: str, edition: versions.Edition) -> InstanceInfo:
    return InstanceInfo.of(versions.version_string(version, edition), edition == "ee")


def errors_of(document: str, version: str, edition: versions.Edition) -> list[str]:
    return [e.message for e in validate(schema_for(version, edition), parse(document))]


def test_every_tool_operation_is_checked() -> None:
    assert {
        "get_pipeline",
        "pipeline_create",
        "pipeline_cancel",
        "get_repository_file",
        "get_duo_session",
    } <= set(OPERATIONS)


@pytest.mark.parametrize(("version", "edition"), BANDS, ids=[versions.band_id(v, e) for v, e in BANDS])
def test_what_the_gateway_sends_a_band_is_valid_there(version: str, edition: versions.Edition) -> None:
    info = info_of(version, edition)
    for name, operation in OPERATIONS.items():
        choice = operation.choice(info)
        if choice.refused is not None:
            # Refused (or read another way) only where GitLab could not take the newest document.
            assert errors_of(operation.document, version, edition), (name, choice.refused)
            continue
        errors = errors_of(load_operation(choice.document), version, edition)
        assert not errors, f"{choice.document} against {version} {edition}: {errors}"
    for name in ("instance_metadata", "startup_check"):  # the questions that learn the version
        assert not errors_of(load_operation(name), version, edition), name


@pytest.mark.parametrize(("version", "edition"), BANDS, ids=[versions.band_id(v, e) for v, e in BANDS])
def test_get_duo_session_is_served_exactly_where_gitlab_has_what_it_reads(
    version: str, edition: versions.Edition
) -> None:
    choice = OPERATIONS["get_duo_session"].choice(info_of(version, edition))
    expected = edition == "ee" and versions.parse_version(version) >= (18, 4)
    assert (choice.refused is None) is expected


def test_the_newest_gitlab_gets_the_documents_as_written() -> None:
    newest = info_of(versions.NEWEST, "ee")
    assert all(op.choice(newest).document == op.name for op in OPERATIONS.values())
