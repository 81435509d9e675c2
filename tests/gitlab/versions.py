"""GitLab versions and editions the tests run against, and which schema coordinates each one has.

``tests/gitlab/gitlab_schema.graphql`` is the newest GitLab EE's schema (19.4). An older GitLab,
or GitLab CE, is that schema minus what it did not have yet: :data:`ARRIVALS` declares, per
schema coordinate (https://spec.graphql.org/draft/#sec-Schema-Coordinates), the first GitLab
version that had it and whether only EE has it; :data:`EE_ONLY_TYPES` names the EE-only types the
gateway's documents can reach. :func:`schema_for` derives a band's schema from the two (see
:mod:`tests.gitlab.band_schema`), with no live GitLab involved.

Sources: GitLab's GraphQL reference (https://docs.gitlab.com/api/graphql/reference/, and
``doc/api/graphql/reference/_index.md`` in GitLab's repository at each release), the
``experiment: { milestone: ... }`` markers in GitLab's ``app/graphql`` and ``ee/app/graphql``,
and GitLab's upgrade paths (https://docs.gitlab.com/update/upgrade_paths/). Where the reference
docs leave a range ("absent in 17.7's, present in 17.9's"), the coordinate is declared at the END
of the range unless GitLab's source pins it earlier: a test then never assumes a field an
instance of that version might lack.

Print a band's schema: ``python -m tests.gitlab.band_schema 17.5 ce > gitlab-17.5-ce.graphql``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Edition = Literal["ee", "ce"]


@dataclass(frozen=True)
class Arrival:
    """One schema coordinate that some supported GitLab lacks.

    Attributes:
        coordinate: ``Type``, ``Type.field``, ``Type.field(arg:)`` or ``Enum.VALUE``.
        version: the first GitLab release (``major.minor``) that has it on the editions it exists on.
        ee_only: only GitLab EE has it (CE never does, whatever its version).
        evidence: where the version comes from, in brief.
    """

    coordinate: str
    version: str
    ee_only: bool = False
    evidence: str = ""


# GitLab's required upgrade stops and the newest release; an instance that upgrades rarely parks
# on one of these (https://docs.gitlab.com/update/upgrade_paths/).
NEWEST = "19.4"
BANDS: tuple[tuple[str, Edition], ...] = (
    ("16.11", "ee"),
    ("17.0", "ee"),
    ("17.5", "ee"),
    ("17.8", "ee"),
    ("17.11", "ee"),
    ("17.11", "ce"),
    ("18.2", "ee"),
    ("18.5", "ee"),
    ("18.8", "ee"),
    (NEWEST, "ee"),
)
"""Every (version, edition) the band-matrix tests run; the last one is what every other test uses."""

# The oldest version the tests model; coordinates older than it are in every band.
OLDEST = "16.11"

_RANGE_END = "reference docs leave a range; its end"

ARRIVALS: tuple[Arrival, ...] = (
    # CI: pipelines and jobs.
    Arrival("Project.pipeline(id:)", "17.4", evidence=f"17.2-17.4, {_RANGE_END} (before: iid: only)"),
    Arrival("CiJob.exitCode", "17.9", evidence=f"17.7-17.9, {_RANGE_END}"),
    Arrival("CiJobInterface.exitCode", "17.9", evidence="with CiJob.exitCode"),
    Arrival("CiJobMinimalAccess.exitCode", "17.9", evidence="with CiJob.exitCode"),
    Arrival("Mutation.pipelineCreate", "17.8", evidence=f"17.6-17.8, {_RANGE_END}"),
    Arrival("PipelineCreateInput", "17.8", evidence="with Mutation.pipelineCreate"),
    Arrival("PipelineCreatePayload", "17.8", evidence="with Mutation.pipelineCreate"),
    Arrival("PipelineCreateInput.async", "17.8", evidence="experiment, milestone 17.8"),
    Arrival("PipelineCreatePayload.requestId", "17.8", evidence="experiment, milestone 17.8"),
    Arrival("PipelineCreateInput.inputs", "17.10", evidence="experiment, milestone 17.10"),
    Arrival(
        "PipelineCancelPayload.pipeline",
        "18.6",
        evidence=f"18.0-18.6 (absent in 17.11's reference), {_RANGE_END}",
    ),
    # Repository.
    Arrival("Repository.commit", "17.11", evidence=f"17.10-17.11, {_RANGE_END}"),
    # Duo (EE only).
    Arrival("Project.duoContextExclusionSettings", "18.2", ee_only=True, evidence="experiment, 18.2"),
    Arrival("DuoContextExclusionSettings", "18.2", ee_only=True, evidence="with the field above"),
    Arrival("ProjectSettingsUpdateInput.duoContextExclusionSettings", "18.2", ee_only=True),
    Arrival("ProjectSetting.duoContextExclusionSettings", "18.2", ee_only=True),
    Arrival("DuoContextExclusionSettingsInput", "18.2", ee_only=True),
    Arrival("Query.duoWorkflowWorkflows", "17.2", ee_only=True, evidence="experiment, milestone 17.2"),
    Arrival("DuoWorkflow", "17.2", ee_only=True, evidence="with Query.duoWorkflowWorkflows"),
    Arrival("DuoWorkflowEvent", "17.2", ee_only=True, evidence="with Query.duoWorkflowWorkflows"),
    Arrival("AiDuoWorkflowsWorkflowID", "17.2", ee_only=True, evidence="with Query.duoWorkflowWorkflows"),
    Arrival("Query.duoWorkflowWorkflows(workflowId:)", "17.5", ee_only=True, evidence="around 17.5"),
    Arrival("DuoWorkflow.statusGroup", "18.4", ee_only=True, evidence="experiment, 18.4"),
    Arrival("DuoWorkflow.latestCheckpoint", "18.4", ee_only=True, evidence="experiment, 18.4"),
    Arrival("DuoWorkflow.webUrl", "19.0", ee_only=True, evidence="experiment, 19.0"),
    Arrival("DuoWorkflowEvent.lastDuoMessage", "19.3", ee_only=True, evidence="experiment, 19.3"),
)
"""Coordinates that arrived after 16.11, or exist only on EE: everything else is in every band."""

EE_ONLY_TYPES: tuple[str, ...] = (
    # ee/app/graphql/types/ai/duo_workflows/*: the Duo Agent Platform's workflows (sessions).
    "DuoWorkflow*",
    "DuoWorkflows*",
    "AiDuoWorkflow*",
    "DeleteDuoWorkflowsWorkflow*",
    "UpdateDuoWorkflow*",
    "VulnerabilityDuoWorkflow",
    "DuoMessage",
    "DuoContextExclusionSettings*",
)
"""EE-only types (``*`` ends a prefix), removed from CE with every field and argument that uses them.

Not every EE-only type of GitLab: the ones the gateway's documents reach. A CE band's schema is
therefore a superset of GitLab CE's, exact wherever the gateway reads."""

REST_ARRIVALS: dict[str, str] = {
    "GET /projects/:id/jobs/:job_id/artifacts/tree": "18.8",
}
"""REST routes the gateway calls that some supported GitLab lacks (it answers them 404)."""


def parse_version(version: str) -> tuple[int, int]:
    """``(major, minor)`` of ``"17.11"``, ``"17.11.3"``, ``"17.11.3-ee"`` or ``"19.4.0-pre"``.

    Raises:
        ValueError: not a GitLab version.
    """
    parts = version.strip().split("-", 1)[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"not a GitLab version: {version!r} (expected e.g. 17.11 or 17.11.3-ee)") from None
    return major, minor


def has(arrival: Arrival, version: str, edition: Edition) -> bool:
    """Whether a GitLab of ``version`` and ``edition`` has ``arrival``'s coordinate."""
    if arrival.ee_only and edition != "ee":
        return False
    return parse_version(version) >= parse_version(arrival.version)


def missing(version: str, edition: Edition) -> list[str]:
    """The declared coordinates a GitLab of ``version`` and ``edition`` lacks (types as ``Type``)."""
    return [a.coordinate for a in ARRIVALS if not has(a, version, edition)]


def has_route(route: str, version: str) -> bool:
    """Whether a GitLab of ``version`` serves the REST ``route`` (``"GET /projects/:id/..."``)."""
    first = REST_ARRIVALS.get(route)
    return first is None or parse_version(version) >= parse_version(first)


def version_string(version: str, edition: Edition) -> str:
    """What ``metadata { version }`` and ``GET /api/v4/version`` answer for a band.

    GitLab EE says ``17.11.0-ee``, CE ``17.11.0``; the newest EE is gitlab.com's ``19.4.0-pre``.
    """
    major, minor = parse_version(version)
    if edition == "ee" and (major, minor) == parse_version(NEWEST):
        return f"{NEWEST}.0-pre"
    return f"{major}.{minor}.0-ee" if edition == "ee" else f"{major}.{minor}.0"


def band_id(version: str, edition: Edition) -> str:
    """A test id for a band: ``17.11-ce``."""
    return f"{version}-{edition}"


def telling_bands(
    coordinates: tuple[str, ...] = (), routes: tuple[str, ...] = ()
) -> list[tuple[str, Edition]]:
    """The bands (of :data:`BANDS`, in its order) that can tell apart what ``coordinates`` and REST
    ``routes`` a test depends on: bands are alike when they have the same of them (and, when one is
    EE-only, the same edition); of each group of alike bands, the oldest and the newest.

    A band's schema differs from the newest only by :data:`ARRIVALS` and :data:`EE_ONLY_TYPES`,
    and its REST routes only by :data:`REST_ARRIVALS`, so alike bands answer a tool that reads
    only these the same; the group's two ends still catch a gateway that draws the line at
    another version than GitLab did. With nothing declared: the oldest and the newest band.

    Raises:
        KeyError: a coordinate or route this module does not declare.
    """
    declared = {a.coordinate: a for a in ARRIVALS}
    for coordinate in coordinates:
        if coordinate not in declared:
            raise KeyError(f"{coordinate}: not in ARRIVALS (a coordinate every band has needs no band)")
    arrivals = [declared[c] for c in coordinates]
    for route in routes:
        if route not in REST_ARRIVALS:
            raise KeyError(f"{route}: not in REST_ARRIVALS")
    by_edition = any(a.ee_only for a in arrivals)
    groups: dict[tuple[object, ...], list[tuple[str, Edition]]] = {}
    for version, edition in BANDS:
        key = (
            tuple(has(a, version, edition) for a in arrivals),
            tuple(has_route(r, version) for r in routes),
            edition if by_edition else None,
        )
        groups.setdefault(key, []).append((version, edition))
    chosen = {band for group in groups.values() for band in (group[0], group[-1])}
    return [band for band in BANDS if band in chosen]
