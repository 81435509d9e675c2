"""``get_repository_file``: read one file of a GitLab repository at a ref, in line windows.

GitLab's own tool (gitlabhq
``app/services/mcp/tools/repositories/get_repository_file_{service,tool}.rb``) is the contract:
same arguments, same ``structuredContent`` (``path``, ``ref``, ``content``, ``metadata
{total_lines, returned_lines {start, end} | null, truncated, size_bytes}``,
``system_instruction``) and the same error texts. Where this gateway does better:

- One GraphQL request on the happy path *and* on the not-found path: the query also asks for
  ``repository.commit(ref)``, so an empty ``blobs`` tells "ref not found" from "file does not
  exist at ref" without GitLab's second lookup.
- ``next: {"offset", "limit"}`` whenever lines remain, and ``commit_sha``, the commit the ref
  named. Content is cached by (credential, project, commit SHA, path): a read whose ref is a full
  SHA is served from the cache with no GitLab request (exclusion rules are re-read after
  ``cache.exclusions_ttl_seconds``); a branch, tag or ``HEAD`` is always resolved again, and the
  content it returned is cached under the SHA it resolved to, so pinning ``ref`` to
  ``commit_sha`` reads the next windows from the cache and from the same version.
- Windows abut exactly, and a cut line ends on a character boundary (``gateway.tools.file_window``).
- A blob URL's branch with ``/`` is split like GitLab's web UI (``gateway.gitlab.blob_urls``); a
  ``#L10-20`` anchor opens the window there; a ``ref`` or ``file_path`` given with the url
  settles the split without fetching ref names.
- Files GitLab truncated (``rawSize`` larger than the text returned) say so in ``metadata``
  (``fetch_truncated``) and in ``system_instruction``, with both sizes in bytes.
- GitLab CE has no ``Project.duoContextExclusionSettings``: the first query that GitLab refuses
  for that field switches this process to the ``_ce`` operations (no rules, as on CE itself).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal
from urllib.parse import unquote

import pathspec
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from gateway.cache import credential_key
from gateway.errors import ToolError, bad_request, not_found
from gateway.gitlab.blob_urls import (
    BlobUrl,
    RefType,
    is_full_sha,
    needs_ref_names,
    parse_blob_url,
    ref_disagreement,
    resolve_url_ref,
    split_ref_and_path,
)
from gateway.gitlab.client import GitLabSession
from gateway.gitlab.errors import GitLabBadRequest, GitLabNotFound
from gateway.gitlab.urls import (
    global_id_number,
    is_numeric_id,
    project_address,
    project_full_path,
    project_node,
)
from gateway.tools.arguments import OptionalProjectId, schema_extra
from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Tool, ToolInput, ToolOutput, ToolResult
from gateway.tools.repository.file_window import MAX_WINDOW_BYTES, CapReason, TextFile, Window, window

DEFAULT_LIMIT = 500
MAX_LIMIT = 2000

#: ``Services.extras`` flag: this GitLab's schema has no ``Project.duoContextExclusionSettings`` (CE).
NO_EXCLUSIONS_FIELD = "get_repository_file.no_exclusions_field"
#: GitLab's (graphql-ruby's) validation error on CE, the only answer that sets that flag: it turns
#: exclusion checks off for every caller, so no other error text may (one merely naming the field).
CE_FIELD_ERROR = "Field 'duoContextExclusionSettings' doesn't exist on type 'Project'"

FileKind = Literal["text", "binary", "lfs"]

#: Path separators ``Gitlab::PathTraversal`` checks ``..`` segments between.
_SEPARATORS = re.compile(r"[/\\]")


# -- arguments -------------------------------------------------------------------------------


def _text_argument(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be a string, not {value!r}")
    return str(value)


OptionalText = Annotated[
    str | SkipJsonSchema[None], BeforeValidator(_text_argument), Field(json_schema_extra=schema_extra())
]


class GetRepositoryFileInput(ToolInput):
    """Give url, or project_id and file_path (and ref, HEAD by default); offset and limit pick the lines."""

    url: OptionalText = Field(
        None,
        description=(
            "GitLab URL of the file, for example "
            "https://gitlab.com/gitlab-org/gitlab/-/blob/master/app/models/user.rb (blob, raw or blame; "
            "?ref_type=heads|tags and a #L10-20 line anchor are honoured). Provide this, or project_id, "
            "file_path, and ref. Only URLs on this gateway's GitLab are accepted."
        ),
    )
    project_id: OptionalProjectId = Field(
        None,
        description="ID or full path of the project, e.g. `42` or `group/subgroup/project`. Required if "
        "url is not provided.",
    )
    file_path: OptionalText = Field(
        None,
        description="Path of the file relative to the repository root, for example app/models/user.rb. "
        "Required if url is not provided.",
    )
    ref: OptionalText = Field(
        None,
        description="Branch name, tag name, or commit SHA. Use HEAD for the default branch (the default when "
        "url is not provided). With url, it must agree with the url's ref.",
    )
    offset: int = Field(0, ge=0, description="Zero-indexed line number to start reading from. Defaults to 0.")
    limit: int = Field(
        DEFAULT_LIMIT,
        ge=1,
        le=MAX_LIMIT,
        description=f"Maximum number of lines to return. Defaults to {DEFAULT_LIMIT}; "
        f"the maximum is {MAX_LIMIT}.",
    )


class _ReturnedLines(BaseModel):
    start: int = Field(description="First returned line, 1-based.")
    end: int = Field(description="Last returned line, 1-based, inclusive.")


class _Metadata(BaseModel):
    model_config = ConfigDict(extra="allow")

    total_lines: int = Field(
        description="Lines in the file (in the part GitLab returned, if fetch_truncated)."
    )
    returned_lines: _ReturnedLines | None = Field(description="Lines in content, or null when none.")
    truncated: bool = Field(description="True when content is not the whole file.")
    size_bytes: int = Field(description="Size of the file in bytes.")
    cap_reason: CapReason | None = Field(
        description="line_cut: one line longer than the 1 MiB window limit was cut; dropped_lines: the "
        "window ends early to stay within 1 MiB; null otherwise."
    )
    fetch_truncated: bool = Field(description="True when GitLab returned only the first part of the file.")


class _Next(BaseModel):
    offset: int
    limit: int


class GetRepositoryFileOutput(ToolOutput):
    """One window of a file: its lines in content, where they sit in metadata, how to read on in next."""

    path: str = Field(description="The file's path relative to the repository root.")
    ref: str = Field(description="The ref read, as given (HEAD for the default branch).")
    commit_sha: str | None = Field(description="The commit the ref named when the file was read.")
    metadata: _Metadata
    next: _Next | None = Field(None, description="Arguments to call again with when lines remain.")
    system_instruction: str | None = Field(None, description="What to do next, for the model.")
    content: str = Field(description="The lines, exactly as in the file (line endings kept).")


# -- what one call reads ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProjectRef:
    """The project as the caller named it.

    Attributes:
        shown: the identifier as given (GitLab's messages quote it).
        full_path: the decoded full path, or None for a numeric ID.
        number: the numeric ID, or None for a path.
    """

    shown: str
    full_path: str | None = None
    number: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        """Cache partition for the project: ``("id", "42")`` or ``("path", "group/project")``."""
        if self.number is not None:
            return ("id", str(self.number))
        return ("path", (self.full_path or "").lower())

    @property
    def address(self) -> dict[str, Any]:
        """GraphQL variables that name the project in the ``get_repository_file*`` documents.

        A numeric ID goes through ``projects(ids:)`` (``byId``; ``Query.project`` takes only a full
        path), a path through ``project(fullPath:)``; the skipped one gets an inert value because
        both variables are declared non-null.
        """
        return project_address(self.full_path, self.number)


@dataclass(frozen=True)
class FileTarget:
    """What to read, after the arguments (or url) were checked and reconciled."""

    project: ProjectRef
    path: str
    ref: str
    ref_type: RefType | None
    offset: int
    limit: int
    from_url: bool = False
    #: A numeric project_id given with a url: the url's project must turn out to have this ID.
    expected_project_id: int | None = None


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


class _Missing(Exception):
    """The file is not there (raised out of a cache load, so nothing is cached)."""

    def __init__(
        self, ref_exists: bool, empty_repository: bool, project_id: int, rules: tuple[str, ...]
    ) -> None:
        super().__init__("missing")
        self.ref_exists = ref_exists
        self.empty_repository = empty_repository
        self.project_id = project_id
        self.rules = rules


# -- the handler -----------------------------------------------------------------------------


async def get_repository_file(ctx: ToolContext, args: GetRepositoryFileInput) -> ToolResult:
    """Read one window of one file (see the module docstring for the contract).

    Raises:
        ToolError: ``bad_request`` for bad or disagreeing arguments, a url on another GitLab,
            binary or LFS files and text that is not UTF-8; ``not_found`` for a missing project,
            ref or file; ``unauthorized`` for a file excluded from AI context.
        GitLabError: GitLab failed (mapped by the registry).
    """
    blob_url = parse_blob_url(args.url, ctx.services.gitlab.base) if args.url is not None else None
    session = ctx.gitlab
    target = await _target(ctx, session, args, blob_url)
    settings = ctx.settings.cache
    files = ctx.services.caches.get("blobs", ttl=settings.blob_ttl_seconds)
    fetched: list[FileRead] = []

    async def fetch() -> FileRead:
        read = await _fetch(ctx, session, target)
        fetched.append(read)
        return read

    try:
        if is_full_sha(target.ref) and target.ref_type is None:
            sha = target.ref.lower()
            key = credential_key(session.credential, "file", *target.project.key, sha, target.path)
            read = await files.get_or_load(key, fetch)
        else:
            read = await fetch()
    except _Missing as missing:
        _check_project(target, missing.project_id)
        _check_excluded(target, missing.rules)
        raise _missing_error(target, missing) from None
    _check_project(target, read.project_id)
    rules = read.rules
    if not fetched and time.monotonic() - read.rules_at > settings.exclusions_ttl_seconds:
        # Served from the cache with rules older than their TTL: a maintainer may have excluded it.
        rules = await _exclusion_rules(ctx, session, target.project)
    _check_excluded(target, rules)
    blob = read.blob
    if blob.kind == "lfs":
        raise bad_request(
            f"File '{target.path}' is stored in LFS ({blob.external_storage or 'lfs'}) and its content "
            f"cannot be read with this tool. Size: {blob.raw_size} bytes.",
            kind="lfs",
            path=target.path,
            ref=target.ref,
            size_bytes=blob.raw_size,
        )
    if blob.kind == "binary" or blob.text is None:
        raise bad_request(
            f"File '{target.path}' is binary and cannot be returned as text. Size: {blob.raw_size} bytes.",
            kind="binary",
            path=target.path,
            ref=target.ref,
            size_bytes=blob.raw_size,
        )
    return ToolResult(structured=_payload(target, read, window(blob.text, target.offset, target.limit)))


# -- arguments → target ----------------------------------------------------------------------


async def _target(
    ctx: ToolContext, session: GitLabSession, args: GetRepositoryFileInput, blob_url: BlobUrl | None
) -> FileTarget:
    """Reconcile ``url`` with ``project_id``/``file_path``/``ref`` (GitLab's
    ``validate_url_consistency!``: project, then file path, then ref); no request unless a url's
    ref/path split is ambiguous."""
    offset, limit = args.offset, args.limit
    if blob_url is None:
        if args.project_id is None or args.file_path is None:
            missing = [n for n in ("project_id", "file_path") if getattr(args, n) is None]
            raise bad_request(
                f"Provide either url, or project_id, file_path, and ref (missing: {', '.join(missing)}).",
                invalid_arguments=missing,
            )
        ref = _ref(args.ref if args.ref is not None else "HEAD")
        ref_type: RefType | None = None
        # GitLab's blobs(ref:) refuses qualified names ("Ref is not valid"); its refType does the same job.
        qualified: tuple[tuple[str, RefType], ...] = (("refs/heads/", "heads"), ("refs/tags/", "tags"))
        for prefix, kind in qualified:
            if ref.startswith(prefix) and len(ref) > len(prefix):
                ref, ref_type = ref[len(prefix) :], kind
        return FileTarget(
            project=_project(args.project_id),
            path=normalize_file_path(args.file_path),
            ref=ref,
            ref_type=ref_type,
            offset=offset,
            limit=limit,
        )

    expected_id: int | None = None
    if args.project_id is not None:
        if is_numeric_id(args.project_id):
            expected_id = int(args.project_id)
        elif project_full_path(args.project_id).lower() != blob_url.project_path.lower():
            raise bad_request(
                f"Project mismatch: project_id is '{args.project_id}' but url contains "
                f"'{blob_url.project_path}'",
                field="project_id",
            )
    ref_and_path = blob_url.ref_and_path
    if ".." in _SEPARATORS.split(ref_and_path):
        # Before the ref/path split, which may ask GitLab for ref names (git refs never hold "..").
        raise bad_request(f"url must not contain a path traversal sequence: '{ref_and_path}'", field="url")
    if ref_and_path.endswith("/"):
        raise bad_request(
            f"url must name a file, not a directory: '{ref_and_path}'. This tool reads one file: list the "
            "directory in GitLab, then pass the URL or path of a file in it.",
            field="url",
        )
    wanted_path = normalize_file_path(args.file_path) if args.file_path is not None else None
    wanted_ref = _ref(args.ref) if args.ref is not None else None
    if wanted_path is not None:
        suffix = "/" + wanted_path
        if not (ref_and_path.endswith(suffix) and len(ref_and_path) > len(suffix)):
            raise bad_request(
                f"File path mismatch: file_path is '{args.file_path}' but url contains "
                f"'{_url_part(blob_url, 'path')}'",
                field="file_path",
            )
        url_ref = ref_and_path[: -len(suffix)]
        if wanted_ref is not None and wanted_ref != url_ref:
            raise bad_request(
                f"Ref mismatch: ref is '{wanted_ref}' but url contains '{url_ref}'", field="ref"
            )
        ref, raw_path = url_ref, wanted_path
    elif wanted_ref is not None:
        error = ref_disagreement(blob_url, wanted_ref)
        if error is not None:
            if not needs_ref_names(blob_url):
                error = bad_request(
                    f"Ref mismatch: ref is '{wanted_ref}' but url contains '{_url_part(blob_url, 'ref')}'",
                    field="ref",
                )
            raise error
        ref, raw_path = wanted_ref, ref_and_path[len(wanted_ref) + 1 :]
    else:
        ref, raw_path = await resolve_url_ref(
            session,
            ctx.services.caches,
            refs_ttl_seconds=ctx.settings.cache.refs_ttl_seconds,
            blob_url=blob_url,
        )
    if blob_url.lines is not None:
        first, last = blob_url.lines
        if "offset" not in args.model_fields_set:
            offset = first - 1
        if "limit" not in args.model_fields_set and last is not None:
            limit = min(last - first + 1, MAX_LIMIT)
    return FileTarget(
        project=ProjectRef(shown=blob_url.project_path, full_path=blob_url.project_path),
        path=normalize_file_path(raw_path),
        ref=_ref(ref),
        ref_type=blob_url.ref_type,
        offset=offset,
        limit=limit,
        from_url=True,
        expected_project_id=expected_id,
    )


def _url_part(blob_url: BlobUrl, part: Literal["ref", "path"]) -> str:
    """The url's ref or path for a mismatch message, without fetching ref names: exact when the
    split is unambiguous, else the whole ``<ref>/<path>`` part."""
    if needs_ref_names(blob_url):
        return blob_url.ref_and_path
    ref, path = split_ref_and_path(blob_url, None)
    return ref if part == "ref" else path


def _project(value: str) -> ProjectRef:
    if is_numeric_id(value):
        return ProjectRef(shown=value, number=int(value))
    return ProjectRef(shown=value, full_path=project_full_path(value))


def _ref(value: str) -> str:
    ref = value.strip()
    if not ref:
        raise bad_request(
            "ref must not be empty: give a branch name, tag name, or commit SHA, or HEAD for the default "
            "branch.",
            field="ref",
        )
    if any(c in ref for c in "\x00\n\r"):
        raise bad_request("ref must not contain NUL or line-break characters.", field="ref")
    return ref


def normalize_file_path(raw: str) -> str:
    """A caller's file path as GitLab's tool normalises it, checked before any request.

    Whitespace around it and leading ``/`` are stripped; ``.`` and empty segments are dropped
    (``./src//x.py`` → ``src/x.py``). The path is used as is otherwise (never percent-decoded:
    ``%`` is a legal file-name character), and GraphQL receives it as a variable, so it is
    encoded exactly once, by JSON.

    Raises:
        ToolError: ``bad_request`` with GitLab's texts (``get_repository_file_tool.rb``,
            ``normalize_path``): an empty path; a trailing ``/`` (a directory); a path traversal
            (``..`` segments, also behind ``\\`` or percent-encoding, as
            ``Gitlab::PathTraversal.path_traversal?`` decodes); NUL or line breaks.
    """
    path = raw.strip().lstrip("/")
    if not path:
        raise bad_request("file_path must not be empty", field="file_path")
    if path.endswith("/"):
        raise bad_request(f"file_path must be a file, not a directory: '{path}'", field="file_path")
    if any(".." in _SEPARATORS.split(p) for p in (path, unquote(path))) or any(c in path for c in "\x00\n\r"):
        raise bad_request(
            f"file_path must not contain a path traversal sequence: '{path}'", field="file_path"
        )
    cleaned = "/".join(segment for segment in path.split("/") if segment not in ("", "."))
    if not cleaned:
        raise bad_request("file_path must not be empty", field="file_path")
    return cleaned


# -- GitLab ----------------------------------------------------------------------------------


async def _fetch(ctx: ToolContext, session: GitLabSession, target: FileTarget) -> FileRead:
    """One GraphQL request: the project, its exclusion rules, the commit and the file.

    Caches what it read under the commit SHA (both project keys) and the rules.

    Raises:
        _Missing: ``blobs`` came back empty.
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
        node = await _project_node(ctx, session, "get_repository_file", {**project.address, **variables})
    except GitLabNotFound:
        # GitLab answers "does not exist or you don't have permission" when the caller may see the
        # project but not its code; keep GitLab's one wording for both (no enumeration).
        raise not_found(
            f"Project '{project.shown}' not found or inaccessible", project=project.shown
        ) from None
    except GitLabBadRequest as err:
        if "ref is not valid" in err.message.lower():
            # Gitlab::GitRefValidator refused the name: no such ref can exist.
            raise _missing_error(target, _Missing(False, False, 0, ())) from None
        if _is_encoding_error(err.message):
            raise bad_request(
                f"File '{target.path}' is not valid UTF-8 text, so GitLab cannot return it as text "
                f"({err.message}). Read it with git instead.",
                kind="not_utf8",
                path=target.path,
                ref=target.ref,
            ) from None
        raise
    if node is None or node.get("repository") is None:
        # GitLab's wording; a project without read_code access looks the same (no enumeration).
        raise not_found(f"Project '{project.shown}' not found or inaccessible", project=project.shown)
    project_id = global_id_number(node.get("id"))
    full_path = str(node.get("fullPath") or project.full_path or "")
    rules = _rules_of(node)
    now = time.monotonic()
    _remember_rules(ctx, session, project, project_id, full_path, rules)
    repository = node["repository"]
    commit = repository.get("commit") or None
    nodes = ((repository.get("blobs") or {}).get("nodes")) or []
    if not nodes:
        raise _Missing(commit is not None, bool(repository.get("empty")), project_id, rules)
    read = FileRead(
        project_id=project_id,
        full_path=full_path,
        commit_sha=str(commit["sha"]) if commit and commit.get("sha") else None,
        blob=_blob(nodes[0], target),
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


async def _project_node(
    ctx: ToolContext, session: GitLabSession, operation: str, variables: dict[str, Any]
) -> dict[str, Any] | None:
    """Send ``operation`` (or its ``_ce`` twin on GitLab CE) and return the project object."""
    extras = ctx.services.extras
    if extras.get(NO_EXCLUSIONS_FIELD):
        operation += "_ce"
    try:
        data = await session.graphql(operation, variables)
    except GitLabBadRequest as err:
        # The client's message is "<summary>: <GitLab's messages, joined by '; '>": exactly one.
        if operation.endswith("_ce") or err.message.partition(": ")[2] != CE_FIELD_ERROR:
            raise
        # CE: the field is EE-only, so GitLab rejected the whole query. Remember it and ask again.
        extras[NO_EXCLUSIONS_FIELD] = True
        data = await session.graphql(operation + "_ce", variables)
    return project_node(data, by_id=variables["byId"])


def _blob(node: dict[str, Any], target: FileTarget) -> FileBlob:
    text = node.get("rawTextBlob")
    raw_size = _int(node.get("rawSize"))
    if node.get("storedExternally"):
        return FileBlob("lfs", raw_size or 0, external_storage=node.get("externalStorage"))
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


def _rules_of(node: dict[str, Any]) -> tuple[str, ...]:
    settings = node.get("duoContextExclusionSettings") or {}
    rules = settings.get("exclusionRules") or []
    return tuple(r for r in rules if isinstance(r, str) and r.strip())


def _remember_rules(
    ctx: ToolContext,
    session: GitLabSession,
    project: ProjectRef,
    project_id: int,
    full_path: str,
    rules: tuple[str, ...],
) -> None:
    cache = ctx.services.caches.get("exclusions", ttl=ctx.settings.cache.exclusions_ttl_seconds)
    for key in (("id", str(project_id)), ("path", full_path.lower()), project.key):
        cache.put(credential_key(session.credential, "exclusions", *key), rules)


async def _exclusion_rules(ctx: ToolContext, session: GitLabSession, project: ProjectRef) -> tuple[str, ...]:
    """The project's current exclusion rules (cached ``cache.exclusions_ttl_seconds``)."""
    if ctx.services.extras.get(NO_EXCLUSIONS_FIELD):
        return ()
    cache = ctx.services.caches.get("exclusions", ttl=ctx.settings.cache.exclusions_ttl_seconds)

    async def load() -> tuple[str, ...]:
        address = project.address
        data = await session.graphql("get_repository_file_exclusions", address)
        node = project_node(data, by_id=address["byId"])
        if node is None:
            raise not_found(f"Project '{project.shown}' not found or inaccessible", project=project.shown)
        return _rules_of(node)

    rules: tuple[str, ...] = await cache.get_or_load(
        credential_key(session.credential, "exclusions", *project.key), load
    )
    return rules


# -- checks and results ----------------------------------------------------------------------


def _check_project(target: FileTarget, project_id: int) -> None:
    if target.expected_project_id is not None and target.expected_project_id != project_id:
        raise bad_request(
            f"Project mismatch: project_id is '{target.expected_project_id}' but url contains "
            f"'{target.project.shown}' (project ID {project_id})",
            field="project_id",
        )


@lru_cache(maxsize=256)
def _exclusion_spec(rules: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(rules)


def is_excluded(rules: tuple[str, ...], path: str) -> bool:
    """True when ``path`` matches the project's Duo context exclusion ``rules``.

    Rules are gitignore-style globs, ``!`` re-including (GitLab ``Ai::FileExclusionService``;
    ``projectSettingsUpdate(duoContextExclusionSettings: {exclusionRules: ["test", "!includetest"]})``),
    matched with pathspec's ``GitIgnoreSpec``. No rules: nothing is excluded.

    Raises:
        ToolError: ``unauthorized`` when a rule cannot be parsed: the file is refused rather than
            possibly leaking what the project meant to exclude.
    """
    if not rules:
        return False
    try:
        spec = _exclusion_spec(rules)
    except (ValueError, TypeError) as err:
        raise ToolError(
            "unauthorized",
            f"File '{path}' cannot be read: this project's Duo context exclusion rules could not be applied "
            f"({err}), so the gateway refuses rather than risk returning an excluded file.",
            kind="excluded",
            path=path,
        ) from None
    return bool(spec.match_file(path))


def _check_excluded(target: FileTarget, rules: tuple[str, ...]) -> None:
    if is_excluded(rules, target.path):
        raise ToolError(
            "unauthorized",
            f"File '{target.path}' is excluded from AI context by this project's settings and cannot be "
            "read.",
            kind="excluded",
            path=target.path,
        )


def _missing_error(target: FileTarget, missing: _Missing) -> ToolError:
    if not missing.ref_exists:
        message = (
            f"Ref '{target.ref}' not found. Provide an existing branch name, tag name, or commit SHA, "
            "or use HEAD for the default branch."
        )
        if missing.empty_repository:
            message += f" The repository of project '{target.project.shown}' is empty: it has no commits yet."
        return not_found(message, kind="ref_not_found", ref=target.ref)
    return not_found(
        f"File '{target.path}' does not exist at ref '{target.ref}'. The path must be relative to the "
        "repository root. Do not retry the same path; find the file's real path first, for example with "
        "GitLab's search (scope blobs) or by listing the directory in GitLab.",
        kind="file_not_found",
        path=target.path,
        ref=target.ref,
    )


def _payload(target: FileTarget, read: FileRead, win: Window) -> dict[str, Any]:
    blob = read.blob
    assert blob.text is not None
    fetch_truncated = blob.fetch_truncated
    payload: dict[str, Any] = {
        "path": target.path,
        "ref": target.ref,
        "commit_sha": read.commit_sha,
        "metadata": {
            "total_lines": win.total_lines,
            "returned_lines": win.returned_lines,
            "truncated": win.line_count < win.total_lines or fetch_truncated or win.cap_reason is not None,
            "size_bytes": blob.raw_size,
            "cap_reason": win.cap_reason,
            "fetch_truncated": fetch_truncated,
        },
    }
    notes: list[str] = []
    if win.past_end:
        notes.append(
            f"Offset {win.offset} is past the end of the file ({win.total_lines} lines). "
            f"Call again with an offset below {win.total_lines}."
        )
    elif win.next_offset is not None:
        payload["next"] = {"offset": win.next_offset, "limit": win.limit}
        notes.append(
            f"File truncated. Remaining lines: {win.remaining}. To view more, call again with "
            f'{{"offset": {win.next_offset}, "limit": {win.limit}}}.'
        )
        if read.commit_sha and not target.from_url and not is_full_sha(target.ref):
            notes.append(
                "To keep reading this same version from the gateway's cache, also pass "
                f'"ref": "{read.commit_sha}".'
            )
    if win.cap_reason == "line_cut":
        notes.append(
            f"A line exceeded the {MAX_WINDOW_BYTES} byte response limit and was cut; "
            "its remainder is not retrievable due to size."
        )
    elif win.cap_reason == "dropped_lines":
        notes.append(f"The window was shortened to stay within the {MAX_WINDOW_BYTES} byte response limit.")
    if fetch_truncated:
        notes.append(
            "This file is larger than the read limit, so total_lines counts only the portion that was "
            f"retrieved. size_bytes is the full size. GitLab returned {blob.text.size_bytes} of "
            f"{blob.raw_size} bytes; the rest cannot be read with this tool."
        )
    if notes:
        payload["system_instruction"] = " ".join(notes)
    payload["content"] = win.content
    return payload


DESCRIPTION = (
    "Read a file from a GitLab repository at a given ref. Reads from GitLab, not the local filesystem: "
    "use it for a project you have not checked out, or a specific branch, tag, or commit — not your "
    "local working copy. Returns the file as committed at ref. For large files, use offset and limit to "
    "read in windows (at most 2000 lines and 1 MiB per call); when lines remain, `next` holds the offset "
    "and limit to call again with, and system_instruction says what to do. Binary and Git LFS files are "
    "reported with their size instead of content. A missing ref and a missing file give different errors."
)

TOOLS: list[Tool] = [
    Tool(
        name="get_repository_file",
        description=DESCRIPTION,
        input_model=GetRepositoryFileInput,
        output_model=GetRepositoryFileOutput,
        handler=get_repository_file,
        annotations=READ_ONLY,
        toolset="repository",
        title="Read a repository file",
    )
]
