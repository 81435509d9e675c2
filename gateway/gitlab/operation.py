"""GraphQL operations as a tool declares them (the documents are found and loaded by
:mod:`gateway.gitlab.operation_loader`).

A tool declares each operation it sends as an :class:`Operation`: the document's name, whether it
is a mutation, and the pydantic model its ``data`` is read into. :meth:`Operation.run` sends it
and returns that model; an answer of another shape is GitLab's failure (``upstream_error``), never
a ``KeyError`` in a handler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from gateway.gitlab.errors import (
    GitLabMaybeSent,
    GitLabSchemaMismatch,
    GitLabUnsupported,
    GitLabUpstreamError,
)
from gateway.gitlab.instance import Edition, InstanceInfo
from gateway.gitlab.needs import Choice, Need, choose, choose_lacking, declared_variables
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
        needs: the schema coordinates it uses that not every supported GitLab has, and what to do
            without each (:mod:`gateway.gitlab.needs`).
    """

    name: str
    answer: type[DataT]
    mutation: bool = False
    needs: tuple[Need, ...] = ()

    @property
    def document(self) -> str:
        """The document text sent to the newest GitLab (fragments included)."""
        return load_operation(self.name)

    def choice(self, info: InstanceInfo) -> Choice:
        """What to send to ``info``'s GitLab: a dict lookup once made for that instance."""
        found: Choice | None = info.choices.get(self.name)
        if found is None:
            found = info.choices[self.name] = choose(self.name, self.needs, info)
        return found

    async def available(self, gitlab: GitLabSession) -> Need | None:
        """None when this GitLab can be sent the operation, else the need it lacks (an
        ``elsewhere`` need: the tool reads the same data another way)."""
        return self.choice(await gitlab.client.instance.current(gitlab)).refused

    async def check_option(self, gitlab: GitLabSession, option: str) -> None:
        """Refuse ``option`` (a tool argument) when this GitLab cannot serve it.

        Raises:
            GitLabUnsupported: it names the version or edition the option needs.
        """
        info = await gitlab.client.instance.current(gitlab)
        need = self.choice(info).missing_option(option)
        if need is not None:
            raise unsupported(info, need, what=f"`{option}`")

    async def run(
        self,
        gitlab: GitLabSession,
        variables: Mapping[str, Any],
        *,
        mutation: bool | None = None,
        iid_of: Callable[[], Awaitable[int]] | None = None,
    ) -> DataT:
        """Send the operation (the document this GitLab takes); return its ``data`` as :attr:`answer`.

        A document GitLab refuses as invalid for its schema ran nothing (a mutation included), so
        the version is read again and, when that changes the document, it is sent once more.

        Args:
            mutation: override :attr:`mutation` (a cancel resent as safe to retry).
            iid_of: the pipeline's ``iid``, for a GitLab that addresses pipelines by ``iid`` only
                (a declared ``by_iid`` need); the variables hold ``pipelineId``.

        Raises:
            GitLabUnsupported: this GitLab cannot serve the operation (its version or edition, or
                a field it lacks anyway).
            GitLabError: whatever the client raises; ``GitLabUpstreamError`` when ``data`` does not
                have the shape the document asked for.
        """
        instance = gitlab.client.instance
        info = await instance.current(gitlab) if instance.due else instance.info
        choice = self.choice(info)
        try:
            return await self._send(gitlab, info, choice, variables, mutation, iid_of)
        except GitLabSchemaMismatch as refused:
            reread = await instance.recheck(gitlab)
            again: Choice | None = self.choice(reread)
            if not reread.known:
                # Still unknown (no caller with a token yet): what GitLab refused tells.
                again = choose_lacking(self.name, self.needs, refused.missing)
            if again is None or again.document == choice.document:
                raise _lacking(reread, refused.missing) from None
        try:
            return await self._send(gitlab, reread, again, variables, mutation, iid_of)
        except GitLabSchemaMismatch as refused:
            raise _lacking(reread, refused.missing) from None

    async def _send(
        self,
        gitlab: GitLabSession,
        info: InstanceInfo,
        choice: Choice,
        variables: Mapping[str, Any],
        mutation: bool | None,
        iid_of: Callable[[], Awaitable[int]] | None,
    ) -> DataT:
        if choice.refused is not None:
            raise unsupported(info, choice.refused)
        if choice.by_iid and variables.get("pipelineId") is not None:
            if iid_of is None:
                raise RuntimeError(f"{self.name} addresses the pipeline by iid here: pass iid_of")
            variables = {k: v for k, v in variables.items() if k != "pipelineId"}
            variables["pipelineIid"] = str(await iid_of())
        if choice.document != self.name:  # a document derived for an older GitLab
            declared = declared_variables(load_operation(choice.document))
            variables = {k: v for k, v in variables.items() if k in declared}
        data = await gitlab.graphql(
            choice.document, variables, mutation=self.mutation if mutation is None else mutation
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


def unsupported(info: InstanceInfo, need: Need, *, what: str | None = None) -> GitLabUnsupported:
    """The refusal of what ``need`` serves (``what``: an argument; None: the tool, which the
    registry names), naming the version or edition it needs and the instance's. On CE an EE need
    is not promised by an upgrade of the version: it takes Enterprise Edition."""
    needs = f"needs {need.needed_in_words} ({need.coordinate})"
    if need.edition is Edition.EE and info.edition is Edition.CE:
        body = (
            f"{needs}; this instance is GitLab {info.version} Community Edition (CE), which does "
            "not have it; do without it here."
        )
    else:
        body = (
            f"{needs}; this GitLab is {_shown(info)}. It becomes available when GitLab is upgraded; "
            "until then, do without it."
        )
    return GitLabUnsupported(
        f"{what or 'This'} {body}",
        needed=need.needed,
        instance=info.label,
        missing=(need.coordinate,),
        unnamed=body if what is None else None,
    )


def _lacking(info: InstanceInfo, missing: tuple[str, ...]) -> GitLabUnsupported:
    """GitLab lacks fields its version should have (a feature flag turned off, a backport)."""
    return GitLabUnsupported(
        f"This GitLab ({_shown(info)}) does not offer {', '.join(missing)}, which this request needs: "
        "the feature may be turned off on it (a feature flag) or not in this release. Ask its "
        "administrator; other tools are not affected.",
        needed=None,
        instance=info.label,
        missing=missing,
    )


def _shown(info: InstanceInfo) -> str:
    return info.label.removeprefix("GitLab ") if info.known else "of a version not known yet"
