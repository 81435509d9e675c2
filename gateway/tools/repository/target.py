"""Arguments → what to read: ``url`` reconciled with ``project_id``, ``file_path`` and ``ref``.

GitLab's ``validate_url_consistency!`` order (project, then file path, then ref), GitLab's texts,
and no request unless a blob URL's ref/path split is ambiguous (then ref names are fetched, see
``gateway.gitlab.blob_urls``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import unquote

from gateway.errors import ToolError, bad_request
from gateway.gitlab.blob_urls import (
    BlobUrl,
    RefType,
    needs_ref_names,
    resolve_url_ref,
    split_ref_and_path,
)
from gateway.gitlab.urls import is_numeric_id, project_address, project_full_path

if TYPE_CHECKING:
    from gateway.gitlab.client import GitLabSession
    from gateway.tools.context import ToolContext

#: Path separators ``Gitlab::PathTraversal`` checks ``..`` segments between.
_SEPARATORS = re.compile(r"[/\\]")
MAX_LIMIT = 2000


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
    #: Other branch or tag names that prefix the url's ``<ref>/<path>`` (for a failed read's message).
    other_refs: tuple[str, ...] = ()


class FileArguments(Protocol):
    """The arguments of ``get_repository_file`` a target is read from (its input model, whose
    module imports this one: named by shape, so the two do not import each other)."""

    @property
    def project_id(self) -> str | None: ...

    @property
    def file_path(self) -> str | None: ...

    @property
    def ref(self) -> str | None: ...

    @property
    def offset(self) -> int: ...

    @property
    def limit(self) -> int: ...

    @property
    def model_fields_set(self) -> set[str]: ...


async def resolve_target(
    ctx: ToolContext, session: GitLabSession, args: FileArguments, blob_url: BlobUrl | None
) -> FileTarget:
    """Reconcile ``url`` with ``project_id``/``file_path``/``ref`` (GitLab's
    ``validate_url_consistency!``: project, then file path, then ref); no request unless a url's
    ref/path split is ambiguous."""
    offset, limit = args.offset, args.limit
    if blob_url is None:
        if args.project_id is None or args.file_path is None:
            missing = [n for n in ("project_id", "file_path") if getattr(args, n) is None]
            raise bad_request(
                "Provide either url, or project_id and file_path (ref is optional: HEAD, the default "
                f"branch; missing: {', '.join(missing)}).",
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
            project=project_ref(args.project_id),
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
            "directory with list_repository_tree, then pass the URL or path of a file in it.",
            field="url",
        )
    wanted_path = normalize_file_path(args.file_path) if args.file_path is not None else None
    wanted_ref = _ref(args.ref) if args.ref is not None else None
    other_refs: tuple[str, ...] = ()
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
        ref, raw_path, other_refs = await resolve_url_ref(
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
        other_refs=other_refs,
    )


def _url_part(blob_url: BlobUrl, part: Literal["ref", "path"]) -> str:
    """The url's ref or path for a mismatch message, without fetching ref names: exact when the
    split is unambiguous, else the whole ``<ref>/<path>`` part."""
    if needs_ref_names(blob_url):
        return blob_url.ref_and_path
    ref, path = split_ref_and_path(blob_url, None)
    return ref if part == "ref" else path


def project_ref(value: str) -> ProjectRef:
    """The project a ``project_id`` argument names (a numeric ID or a full path)."""
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


def ref_disagreement(blob_url: BlobUrl, ref: str) -> ToolError | None:
    """``bad_request`` naming ``ref`` when no split of the URL starts with it, else None."""
    if blob_url.ref_and_path.startswith(ref + "/") and len(blob_url.ref_and_path) > len(ref) + 1:
        return None
    return bad_request(
        f"Ref mismatch: ref is '{ref}' but url contains '{blob_url.ref_and_path}' (its ref and file path), "
        "which does not start with that ref. Pass a ref that agrees with the url, or leave ref out.",
        field="ref",
    )
