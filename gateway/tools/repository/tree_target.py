"""``list_repository_tree``'s ``url``: a project or folder (``/-/tree/``) URL on the configured
GitLab, reconciled with ``project_id``, ``ref`` and ``folder_path`` as ``get_repository_file``
reconciles its file URL (``gateway.tools.repository.target``): what the URL names wins, an
argument given beside it must agree, and a ref with slashes is split as GitLab's web UI splits it
(ref names fetched only when the split is ambiguous)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.errors import bad_request
from gateway.gitlab.blob_urls import TREE_END, parse_tree_url, resolve_url_ref
from gateway.gitlab.urls import is_numeric_id, project_full_path
from gateway.tools.arguments import shown

if TYPE_CHECKING:
    from gateway.tools.context import ToolContext


MAX_PATH_CHARS = 4096


def plain_folder(value: str | None) -> str | None:
    """``value`` as a folder inside the repository (``a/b``; None: the root).

    Raises:
        ValueError: too long, a backslash or control character, or a ``.`` or ``..`` segment.
    """
    if value is None:
        return None
    if len(value) > MAX_PATH_CHARS:
        raise ValueError(f"is {len(value)} characters long; a folder path of at most {MAX_PATH_CHARS}")
    if "\\" in value or any(ord(c) < 32 for c in value):
        raise ValueError(f"must be a plain repository path with `/` separators, not {shown(value)}")
    segments = [s for s in value.strip("/").split("/") if s]
    if any(s in (".", "..") for s in segments):
        raise ValueError("must name a folder inside the repository (no `.` or `..` segments)")
    return "/".join(segments) or None


@dataclass(frozen=True)
class TreeTarget:
    """What to list: the project (as given, or the URL's full path), the ref and the folder."""

    project: str
    ref: str | None
    folder: str | None


async def tree_target(
    ctx: ToolContext, url: str | None, project_id: str | None, ref: str | None, folder: str | None
) -> TreeTarget:
    """The project, ref and folder to list, from ``url`` and the arguments.

    Raises:
        ToolError: ``bad_request`` for neither ``url`` nor ``project_id``, or an argument that
            disagrees with the URL.
        InvalidReference: a URL not on the configured GitLab, or not a project or folder page.
        GitLabError: the lookup of ref names (for a ref with slashes) failed.
    """
    if url is None:
        if project_id is None:
            raise bad_request(
                "Provide project_id (or the url of the project or of a folder in it).",
                invalid_arguments=["project_id"],
            )
        return TreeTarget(project_id, ref, folder)
    parsed = parse_tree_url(url, ctx.services.gitlab.base)
    if project_id is not None and (
        is_numeric_id(project_id) or project_full_path(project_id).lower() != parsed.project_path.lower()
    ):
        raise bad_request(
            f"Project mismatch: project_id is '{project_id}' but url names '{parsed.project_path}'. "
            "Give one of them.",
            field="project_id",
        )
    if parsed.ref_and_folder is None:
        return TreeTarget(parsed.project_path, ref, folder)
    if folder is not None:
        raise bad_request(
            "url names the ref and folder already: leave folder_path out, or give project_id, ref and "
            "folder_path instead of the url.",
            field="folder_path",
        )
    named = parsed.ref_and_folder.ref_and_path
    try:  # before any request: git refuses `.` and `..` in ref names too
        plain_folder(named.removesuffix(TREE_END))
    except ValueError as err:
        raise bad_request(f"url's ref and folder {err}", field="url") from None
    if ref is not None:
        if not named.startswith(ref + "/"):
            shown = named.removesuffix("/" + TREE_END)
            raise bad_request(f"Ref mismatch: ref is '{ref}' but url contains '{shown}'", field="ref")
        url_ref, path = ref, named[len(ref) + 1 :]
    else:
        url_ref, path, _ = await resolve_url_ref(
            ctx.gitlab,
            ctx.services.caches,
            refs_ttl_seconds=ctx.settings.cache.refs_ttl_seconds,
            blob_url=parsed.ref_and_folder,
        )
    try:
        folder_path = plain_folder(path.removesuffix(TREE_END))
    except ValueError as err:
        raise bad_request(f"url's folder {err}", field="url") from None
    return TreeTarget(parsed.project_path, url_ref, folder_path)
