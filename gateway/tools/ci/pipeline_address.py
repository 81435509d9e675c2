"""How a pipeline is addressed inside its project on each GitLab.

``Project.pipeline(id:)`` arrived in GitLab 17.4 (GitLab's GraphQL reference); before, a project's
pipeline is found by its ``iid`` only. On those versions the documents that read a pipeline by ID
are sent with ``pipeline(iid:)`` (:data:`PIPELINE_BY_ID`, a ``by_iid`` need), and the iid comes
from REST ``GET /projects/:id/pipelines/:pipeline_id`` (https://docs.gitlab.com/api/pipelines/#get-a-single-pipeline),
read once per call however many documents need it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.errors import ToolError
from gateway.gitlab.client import GitLabSession
from gateway.gitlab.errors import GitLabNotFound
from gateway.gitlab.needs import Need
from gateway.gitlab.urls import encode_project

PIPELINE_BY_ID = Need(
    "Project.pipeline(id:)",
    since=(17, 4),
    without="by_iid",
    note="pipelines are read by iid (one more REST request)",
    differs=False,
)

#: ``await iid_of()``: the pipeline's iid (read at most once).
IidOf = Callable[[], Awaitable[int]]


def iid_reader(
    gitlab: GitLabSession, project: str | int, pipeline_id: int, missing: Callable[[], ToolError]
) -> IidOf:
    """The iid of pipeline ``pipeline_id`` in ``project`` (an ID or full path), read with REST on
    first use and remembered.

    Args:
        missing: the error for a pipeline GitLab does not show (the caller's own wording).

    Raises (when awaited):
        ToolError: ``missing()`` for a 404 or an answer without an iid.
    """
    found: list[int] = []

    async def iid_of() -> int:
        if not found:
            try:
                answer = await gitlab.rest(
                    "GET",
                    "/projects/{id}/pipelines/{pipeline_id}",
                    path_params={"id": encode_project(project), "pipeline_id": pipeline_id},
                )
            except GitLabNotFound:
                raise missing() from None
            iid = answer.get("iid") if isinstance(answer, dict) else None
            if not isinstance(iid, int) or isinstance(iid, bool):
                raise missing()
            found.append(iid)
        return found[0]

    return iid_of
