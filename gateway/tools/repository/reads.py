"""The GitLab side of ``get_repository_file``: one GraphQL read of the project, its exclusion
rules, the commit and the file, cached under the commit SHA.

GitLab CE, and EE before 18.2, have no ``Project.duoContextExclusionSettings``: they are sent the
documents without it (no rules, as on CE itself). Before GitLab 17.11 there is no
``Repository.commit(ref:)``: the commit the ref names is read with REST
(``GET /projects/:id/repository/commits/:sha``, https://docs.gitlab.com/api/commits/#get-a-single-commit).
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from gateway.cache import AsyncTTLCache, credential_key
from gateway.errors import ToolError, bad_request, not_found
from gateway.gitlab.errors import GitLabBadRequest, GitLabNotFound
from gateway.gitlab.instance import Edition
from gateway.gitlab.needs import Need
from gateway.gitlab.operation import ByPathOrId, GlobalIdNumber, GraphQLData, Operation
from gateway.tools.repository.file_window import TextFile
from gateway.tools.repository.target import FileTarget, ProjectRef
from gateway.tools.visibility import ANONYMOUS_READS, is_anonymous

if TYPE_CHECKING:
    from gateway.gitlab.client import GitLabSession
    from gateway.tools.context import ToolContext

FileKind = Literal["text", "binary", "lfs"]

# -- GitLab's answers -----------------------------------------------------------------------------


class ExclusionSettings(GraphQLData):
    exclusionRules: list[Any] | None = None


class Commit(GraphQLData):
    sha: str | None = None


class BlobNode(GraphQLData):
    rawSize: Any = None  # GitLab's BigInt arrives as a JSON string ("1234")
    rawTextBlob: str | None = None
    storedExternally: bool | None = None
    externalStorage: str | None = None


class Blobs(GraphQLData):
    nodes: list[BlobNode | None] | None = None


class RepositoryNode(GraphQLData):
    empty: bool | None = None
    commit: Commit | None = None
    blobs: Blobs | None = None


class FileProject(GraphQLData):
    """The project of ``getRepositoryFileProject`` (and, without ``repository``, of the
    exclusions document); ``duoContextExclusionSettings`` is absent on GitLab CE."""

    id: GlobalIdNumber
    fullPath: str | None = None
    duoContextExclusionSettings: ExclusionSettings | None = None
    repository: RepositoryNode | None = None

    def rules(self) -> tuple[str, ...]:
        settings = self.duoContextExclusionSettings
        return tuple(
            r
            for r in (settings.exclusionRules if settings else None) or []
            if isinstance(r, str) and r.strip()
        )


class FileAnswer(ByPathOrId[FileProject]):
    """``data`` of ``GetRepositoryFile``, ``GetRepositoryFileCe`` and the exclusions document."""


#: Duo context exclusion rules: GitLab EE 18.2 and later (on CE, as before, there are none).
EXCLUSION_RULES = Need(
    "Project.duoContextExclusionSettings",
    since=(18, 2),
    edition=Edition.EE,
    without="drop",
    note="no Duo context exclusion rules (GitLab has none)",
    differs=False,
)
GET_REPOSITORY_FILE = Operation(
    "get_repository_file",
    FileAnswer,
    needs=(
        EXCLUSION_RULES,
        Need(
            "Repository.commit(ref:)",
            since=(17, 11),
            without="drop",
            note="the commit SHA is read with REST (one more request)",
            differs=False,
        ),
    ),
)
#: Before a read served from the content cache: the caller still reads the project's code, and
#: the project's exclusion rules.
GET_REPOSITORY_FILE_EXCLUSIONS = Operation(
    "get_repository_file_exclusions", FileAnswer, needs=(EXCLUSION_RULES,)
)


@dataclass(frozen=True)
class FileBlob:
    """A file as GitLab returned it at one commit (immutable; cached).

    Attributes:
        kind: ``text``, ``binary`` (``rawTextBlob`` null) or ``lfs`` (``storedExternally``).
        raw_size: ``rawSize``: the file's size in bytes (the LFS object's size for LFS).
        text: the text for ``kind == "text"``.
        external_storage: ``externalStorage`` (``lfs``) for LFS files.
    """

    kind: FileKind
    raw_size: int
    text: TextFile | None = None
    external_storage: str | None = None

    @property
    def fetch_truncated(self) -> bool:
        """GitLab returned fewer bytes than the file has (``Gitlab::Git::Blob#truncated?``)."""
        return self.text is not None and self.raw_size > self.text.size_bytes


@dataclass(frozen=True)
class FileRead:
    """One GraphQL answer about a file, as cached under its commit SHA.

    Attributes:
        project_id: the project's numeric ID.
        full_path: the project's full path.
        commit_sha: the commit the ref named.
        blob: the file.
        rules: the project's Duo context exclusion rules when read.
        rules_at: ``time.monotonic()`` when ``rules`` were read.
    """

    project_id: int
    full_path: str
    commit_sha: str | None
    blob: FileBlob
    rules: tuple[str, ...]
    rules_at: float


class Missing(Exception):
    """The file is not there (raised out of a cache load, so nothing is cached)."""

    def __init__(
        self, ref_exists: bool, empty_repository: bool, project_id: int, rules: tuple[str, ...]
    ) -> None:
        super().__init__("missing")
        self.ref_exists = ref_exists
        self.empty_repository = empty_repository
        self.project_id = project_id
        self.rules = rules


async def fetch_file(ctx: ToolContext, session: GitLabSession, target: FileTarget) -> FileRead:
    """One GraphQL request: the project, its exclusion rules, the commit and the file.

    Caches what it read under the commit SHA (both project keys) and the rules.

    Raises:
        Missing: ``blobs`` came back empty.
        ToolError: ``not_found`` for a project the caller cannot see; ``bad_request`` for a file
            that is not UTF-8.
    """
    project = target.project
    commit_ref = target.ref
    if target.ref_type == "heads":
        commit_ref = f"refs/heads/{target.ref}"
    elif target.ref_type == "tags":
        commit_ref = f"refs/tags/{target.ref}"
    variables: dict[str, Any] = {
        "ref": target.ref,
        "commitRef": commit_ref,
        "paths": [target.path],
        "refType": target.ref_type.upper() if target.ref_type else None,
    }
    try:
        node = await _read_project(ctx, session, {**project.address, **variables})
    except GitLabNotFound:
        # GitLab answers "does not exist or you don't have permission" when the caller may see the
        # project but not its code; keep GitLab's one wording for both (no enumeration).
        raise project_not_found(project, session) from None
    except GitLabBadRequest as err:
        if "ref is not valid" in err.message.lower():
            # Gitlab::GitRefValidator refused the name: no such ref can exist.
            raise missing_error(target, Missing(False, False, 0, ())) from None
        if _is_encoding_error(err.message):
            raise bad_request(
                f"File '{target.path}' is not valid UTF-8 text, so GitLab cannot return it as text "
                f"({err.message}). Read it with git instead.",
                kind="not_utf8",
                path=target.path,
                ref=target.ref,
            ) from None
        raise
    if node is None or node.repository is None:
        # GitLab's wording; a project without read_code access looks the same (no enumeration).
        raise project_not_found(project, session)
    project_id = node.id
    full_path = node.fullPath or project.full_path or ""
    rules = node.rules()
    now = time.monotonic()
    _remember_rules(ctx, session, project, project_id, full_path, rules)
    repository = node.repository
    commit = repository.commit
    if "commit" not in repository.model_fields_set:  # a GitLab before Repository.commit(ref:)
        commit = await _commit_with_rest(session, project_id, commit_ref)
    blob = next((b for b in (repository.blobs.nodes if repository.blobs else None) or [] if b), None)
    if blob is None:
        raise Missing(commit is not None, bool(repository.empty), project_id, rules)
    read = FileRead(
        project_id=project_id,
        full_path=full_path,
        commit_sha=commit.sha if commit and commit.sha else None,
        blob=read_blob(blob, target),
        rules=rules,
        rules_at=now,
    )
    if read.commit_sha is not None:
        # Content at a commit never changes. (GitLab resolves blobs and commit(ref) separately
        # inside one query, so a push landing between the two could pair this content with the
        # next commit; the window is milliseconds and the entry stays within this credential.)
        files = ctx.services.caches.get("blobs", ttl=ctx.settings.cache.blob_ttl_seconds)
        sha = read.commit_sha.lower()
        for key in (("id", str(project_id)), ("path", full_path.lower())):
            files.put(credential_key(session.credential, "file", *key, sha, target.path), read)
    return read


async def _read_project(
    ctx: ToolContext, session: GitLabSession, variables: dict[str, Any]
) -> FileProject | None:
    """Send the file read (the document this GitLab takes) and return the project."""
    return (await GET_REPOSITORY_FILE.run(session, variables)).project_node()


async def _commit_with_rest(session: GitLabSession, project_id: int, commit_ref: str) -> Commit | None:
    """The commit ``commit_ref`` names, or None when it names none (404)."""
    try:
        answer = await session.rest(
            "GET",
            "/projects/{id}/repository/commits/{sha}",
            path_params={"id": project_id, "sha": quote(commit_ref, safe="")},
        )
    except GitLabNotFound:
        return None
    sha = answer.get("id") if isinstance(answer, dict) else None
    return Commit(sha=sha) if isinstance(sha, str) else None


def read_blob(node: BlobNode, target: FileTarget) -> FileBlob:
    text = node.rawTextBlob
    raw_size = _int(node.rawSize)
    if node.storedExternally:
        return FileBlob("lfs", raw_size or 0, external_storage=node.externalStorage)
    if text is None:
        return FileBlob("binary", raw_size or 0)
    try:
        file = TextFile.from_text(str(text))
    except UnicodeEncodeError:  # lone surrogates: GitLab sent something that is not Unicode text
        raise bad_request(
            f"File '{target.path}' is not valid UTF-8 text, so it cannot be returned as text.",
            kind="not_utf8",
            path=target.path,
            ref=target.ref,
        ) from None
    return FileBlob("text", raw_size if raw_size is not None else file.size_bytes, text=file)


def _int(value: Any) -> int | None:
    """GitLab's ``BigInt`` arrives as a JSON string (``"1234"``)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _is_encoding_error(message: str) -> bool:
    lowered = message.lower()
    return "utf-8" in lowered and ("encod" in lowered or "invalid byte sequence" in lowered)


def _access_cache(ctx: ToolContext) -> AsyncTTLCache[tuple[str, ...]]:
    """Per (credential, project): the exclusion rules GitLab returned with the proof that this
    credential could read the project's code. An entry lives the shorter of
    ``cache.exclusions_ttl_seconds`` and ``cache.access_check_seconds``; no entry, no cached content."""
    settings = ctx.settings.cache
    ttl = min(settings.exclusions_ttl_seconds, settings.access_check_seconds)
    return ctx.services.caches.get("exclusions", ttl=ttl)


def _remember_rules(
    ctx: ToolContext,
    session: GitLabSession,
    project: ProjectRef,
    project_id: int,
    full_path: str,
    rules: tuple[str, ...],
) -> None:
    cache = _access_cache(ctx)
    for key in (("id", str(project_id)), ("path", full_path.lower()), project.key):
        cache.put(credential_key(session.credential, "exclusions", *key), rules)


async def exclusion_rules(ctx: ToolContext, session: GitLabSession, project: ProjectRef) -> tuple[str, ...]:
    """The project's current exclusion rules, proving on the way that the caller may still read
    the project's code: one small request per credential and project per cache lifetime.

    Raises:
        ToolError: ``not_found`` when GitLab no longer shows this credential the project or its
            repository.
        GitLabError: GitLab refused the credential (revoked: ``unauthorized``) or failed.
    """
    cache = _access_cache(ctx)

    async def load() -> tuple[str, ...]:
        answer = await GET_REPOSITORY_FILE_EXCLUSIONS.run(session, project.address)
        node = answer.project_node()
        if node is None or node.repository is None:
            raise project_not_found(project, session)
        return node.rules()

    rules: tuple[str, ...] = await cache.get_or_load(
        credential_key(session.credential, "exclusions", *project.key), load
    )
    return rules


def project_not_found(project: ProjectRef, session: GitLabSession) -> ToolError:
    """GitLab's wording for a project that is missing or hidden (it does not say which), plus, for an
    anonymous gateway, that only public projects are visible to it."""
    message = f"Project '{project.shown}' not found or inaccessible"
    if is_anonymous(session.credential):
        message += f". {ANONYMOUS_READS}"
    return not_found(message, project=project.shown)


def missing_error(target: FileTarget, missing: Missing) -> ToolError:
    if not missing.ref_exists:
        message = (
            f"Ref '{target.ref}' not found. Provide an existing branch name, tag name, or commit SHA, "
            "or use HEAD for the default branch."
        )
        if missing.empty_repository:
            message += f" The repository of project '{target.project.shown}' is empty: it has no commits yet."
        if target.from_url:
            message += f" {_url_refs_tried(target)}"
        return not_found(message, kind="ref_not_found", ref=target.ref)
    if target.from_url:
        # The agent gave a link: never ask it for one; say how the link was read and what else it
        # could mean.
        return not_found(
            f"File '{target.path}' does not exist at ref '{target.ref}'. {_url_refs_tried(target)} The "
            "link may be to a file that was moved or deleted on that ref since, or to another "
            f"project. {_tree_hint(target)}",
            kind="file_not_found",
            path=target.path,
            ref=target.ref,
            refs_tried=[target.ref],
            other_refs=list(target.other_refs),
        )
    return not_found(
        f"File '{target.path}' does not exist at ref '{target.ref}'. The path must be relative to the "
        "repository root, and is case-sensitive. Do not retry the same path; find the file's real path "
        f"first: {_tree_hint(target)} A link to the file in GitLab's web UI has it too, and the url "
        "argument takes such a link.",
        kind="file_not_found",
        path=target.path,
        ref=target.ref,
    )


def _tree_hint(target: FileTarget) -> str:
    """Where list_repository_tree shows the folder the file was looked for in."""
    folder = posixpath.dirname(target.path.strip("/"))
    where = f"folder_path '{folder}'" if folder else "no folder_path (the root)"
    return (
        f"list_repository_tree with project_id '{target.project.shown}', ref '{target.ref}' and {where} "
        "lists the files there (`recursive: true` lists every path below it)."
    )


def _url_refs_tried(target: FileTarget) -> str:
    """How a url was split, and the other refs that prefix it (each readable by passing it as ``ref``
    with the same url)."""
    tried = f"Ref tried: '{target.ref}' (how GitLab splits this url into ref and path)."
    if not target.other_refs:
        return tried
    others = ", ".join(f"'{name}'" for name in target.other_refs)
    return (
        f"{tried} Other branch or tag names that prefix the url: {others}; to read the url with "
        "one of them as the ref, pass it as ref together with the same url."
    )
