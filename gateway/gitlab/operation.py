"""GraphQL operations as a tool declares them (the documents are found and loaded by
:mod:`gateway.gitlab.operation_loader`).

A tool declares each operation it sends as an :class:`Operation`: the document's name, whether it
is a mutation, and the pydantic model its ``data`` is read into. :meth:`Operation.run` sends it
and returns that model; an answer of another shape is GitLab's failure (``upstream_error``), never
a ``KeyError`` in a handler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from gateway.gitlab.errors import GitLabMaybeSent, GitLabUpstreamError
from gateway.gitlab.operation_loader import load_operation
from gateway.gitlab.urls import global_id_number

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gateway.gitlab.client import GitLabSession


class GraphQLData(BaseModel):
    """Base of the models GraphQL answers are read into: fields GitLab adds are ignored, and
    camelCase names are GitLab's, so the models mirror the documents they read."""

    model_config = ConfigDict(extra="ignore", frozen=True)


#: A global ID (``gid://gitlab/Ci::Build/111``), read as its integer tail.
GlobalIdNumber = Annotated[int, BeforeValidator(global_id_number)]

DataT = TypeVar("DataT", bound=BaseModel)
ProjectT = TypeVar("ProjectT", bound=BaseModel)


class ProjectNodes(GraphQLData, Generic[ProjectT]):
    nodes: list[ProjectT | None] | None = None


class ByPathOrId(GraphQLData, Generic[ProjectT]):
    """The answer to a document that reads one project by full path (``project``) or by numeric ID
    (``projects(ids:)``), as :func:`gateway.gitlab.urls.project_address` addresses it."""

    project: ProjectT | None = None
    projects: ProjectNodes[ProjectT] | None = None

    def project_node(self) -> ProjectT | None:
        """The project, or None when it is missing or the caller cannot see it."""
        if self.projects is not None:
            return next((n for n in self.projects.nodes or [] if n is not None), None)
        return self.project


@dataclass(frozen=True)
class Operation(Generic[DataT]):
    """One GraphQL operation a tool sends.

    Attributes:
        name: the document's file stem under ``operations/<domain>/``.
        answer: the model ``data`` is read into.
        mutation: True for a mutation: never resent once it may have reached GitLab.
    """

    name: str
    answer: type[DataT]
    mutation: bool = False

    @property
    def document(self) -> str:
        """The document text sent to GitLab (fragments included)."""
        return load_operation(self.name)

    async def run(
        self, gitlab: GitLabSession, variables: Mapping[str, Any], *, mutation: bool | None = None
    ) -> DataT:
        """Send the operation; return its ``data`` as :attr:`answer`.

        Args:
            mutation: override :attr:`mutation` (a cancel resent as safe to retry).

        Raises:
            GitLabError: whatever the client raises; ``GitLabUpstreamError`` when ``data`` does not
                have the shape the document asked for.
        """
        data = await gitlab.graphql(
            self.name, variables, mutation=self.mutation if mutation is None else mutation
        )
        return self.read(data, request_id=gitlab.request_id)

    def read(self, data: Any, *, request_id: str | None = None) -> DataT:
        """``data`` as :attr:`answer`.

        Raises:
            GitLabUpstreamError: ``data`` lacks a field the document selects, or holds another type;
                :class:`GitLabMaybeSent` for a mutation (it reached GitLab and may have applied).
        """
        try:
            return self.answer.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "data"
            error = GitLabMaybeSent if self.mutation else GitLabUpstreamError
            raise error(
                f"GitLab answered {self.name} in an unexpected shape ({where}: {first['msg']}); try again, "
                "and "
                "report it if it persists.",
                request_id=request_id,
            ) from None
