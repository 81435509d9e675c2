"""``list_repository_tree``: the files and folders of a repository at a ref, one folder or all
below it, paged (``GET /projects/:id/repository/tree``,
https://docs.gitlab.com/api/repositories/#list-repository-tree).

What ``get_repository_file``'s file-not-found error sends an agent to: the real path of a file,
found by listing its folder (or, with ``recursive``, every path below one).

REST rather than GraphQL: ``Repository.tree`` answers one folder's ``trees``, ``blobs`` and
``submodules`` as three separate connections, and ``Repository.paginatedTree`` pages trees of
entries, where an agent wants one list of paths in pages. GitLab pages the REST tree by number
(``page``, ``per_page``); the cursor handed out holds the next page's number and its size, so a
page size once chosen is kept across the pages of one listing.

GitLab answers ``404 Tree Not Found`` for a ref that names no commit, and an empty list for a path
that is no folder at the ref: both are told (a ref with the nearest branch and tag names).

Entries the project's Duo context exclusion rules exclude from AI context (GitLab EE 18.2 and
later) are left out, as ``get_repository_file`` refuses them: the rules are read and matched the
same way (a folder as ``path/``), and the result counts what was left out.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.errors import ToolError, bad_request, not_found
from gateway.gitlab.errors import GitLabNotFound
from gateway.gitlab.urls import encode_project
from gateway.tools.arguments import PROJECT_ALIASES, OptionalProjectId, OptionalText, shown
from gateway.tools.context import ToolContext
from gateway.tools.pagination import (
    PAGING,
    Cursor,
    PageInfo,
    PageSize,
    after_field,
    cursor_position,
    first_field,
    opaque_cursor,
)
from gateway.tools.ref_hints import check_ref
from gateway.tools.registry import READ_ONLY, Tool, ToolInput, ToolOutput
from gateway.tools.repository.checks import is_excluded
from gateway.tools.repository.reads import GET_REPOSITORY_FILE_EXCLUSIONS, exclusion_rules
from gateway.tools.repository.target import project_ref
from gateway.tools.repository.tree_target import plain_folder, tree_target
from gateway.tools.visibility import project_not_found_message

TREE_ROUTE = "/projects/{id}/repository/tree"


class ListRepositoryTreeInput(ToolInput):
    """The project (or its url), the ref and folder, and the page."""

    #: ``path``: GitLab's REST name for the folder.
    argument_aliases = {**PROJECT_ALIASES, "path": "folder_path"}

    url: OptionalText = Field(
        None,
        description=(
            "The URL of the project or of a folder in it on this GitLab, e.g. "
            "https://gitlab.example.com/group/project/-/tree/main/src/app (`?ref_type=` is honoured). "
            "Give this, or project_id (with ref and folder_path, optionally)."
        ),
    )
    project_id: OptionalProjectId = Field(
        None,
        description="ID or full path of the project, e.g. `42` or `group/subgroup/project`. Required if "
        "url is not provided.",
    )
    ref: OptionalText = Field(
        None, description="Branch, tag or commit SHA to list, e.g. `main`. Default: the default branch."
    )
    folder_path: OptionalText = Field(
        None,
        description="Folder to list, relative to the repository root, e.g. `src/app`. Default: the root.",
    )
    recursive: bool = Field(
        False, description="List every file and folder below `folder_path`, not only its direct entries."
    )
    first: PageSize = first_field("the entries")
    after: Cursor = after_field("the entries")

    @field_validator("ref")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        if value is not None and not 1 <= len(value.strip()) <= 1024:
            raise ValueError(
                f"must be a branch, tag or commit SHA of 1 to 1024 characters, not {shown(value)}"
            )
        return value.strip() if value is not None else None

    @field_validator("folder_path")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        return plain_folder(value)


class TreeEntry(BaseModel):
    # No docstring: it would be repeated in the outputSchema.
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Path from the repository root: get_repository_file's `file_path`.")
    name: str
    type: Literal["blob", "tree", "commit"] = Field(
        description="`blob`: a file; `tree`: a folder (list it with `folder_path`); `commit`: a submodule."
    )
    mode: str | None = Field(description="The git file mode, e.g. `100644`, `100755`, `040000`.")


class ListRepositoryTreeOutput(ToolOutput):
    """One page of the folder's entries, in GitLab's order (folders first)."""

    ref: str | None = Field(description="The ref listed (null: the default branch).")
    folder_path: str | None = Field(description="The folder listed (null: the root).")
    entries: list[TreeEntry]
    page_info: PageInfo
    nearest_refs: list[str] | None = Field(
        None, description="For a ref GitLab does not know: the nearest names."
    )
    excluded_from_ai_context: int | None = Field(
        None,
        description="How many entries of this page were left out: the project's Duo context exclusion "
        "rules exclude them from AI context (get_repository_file refuses them too).",
    )
    system_instruction: str | None = Field(None, description="What to do next, for the model.")


def _cursor(page: int, size: int) -> str:
    return opaque_cursor(f"p{page}.{size}")


def _position(after: str) -> tuple[int, int]:
    """``(page, per_page)`` of a cursor this tool handed out; ``bad_request`` for anything else."""
    try:
        raw = cursor_position(after)
        page, _, size = raw.removeprefix("p").partition(".")
        if not raw.startswith("p") or int(page) < 1 or not 1 <= int(size) <= 100:
            raise ValueError(raw)
        return int(page), int(size)
    except ValueError:
        raise bad_request(
            "`after` is not a cursor of this listing: pass `page_info.end_cursor` from the previous "
            "list_repository_tree call, unchanged.",
            invalid_arguments=["after"],
        ) from None


def _entry(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
        return None
    kind = item.get("type")
    mode = item.get("mode")
    return {
        "path": item["path"],
        "name": item.get("name") if isinstance(item.get("name"), str) else item["path"].rsplit("/", 1)[-1],
        "type": kind if kind in ("blob", "tree", "commit") else "blob",
        "mode": mode if isinstance(mode, str) else None,
    }


def _excluded(rules: tuple[str, ...], entry: dict[str, Any]) -> bool:
    """Whether the exclusion rules exclude ``entry`` (a folder matched as ``path/``, so that a
    folder rule such as ``secrets/`` hides the folder too)."""
    path = f"{entry['path']}/" if entry["type"] == "tree" else entry["path"]
    try:
        return is_excluded(rules, path)
    except ToolError as err:
        raise ToolError(
            "unauthorized",
            "The listing cannot be returned: this project's Duo context exclusion rules could not be "
            "applied, so the gateway refuses rather than risk listing excluded files.",
            kind="excluded",
        ) from err


async def list_repository_tree(ctx: ToolContext, args: ListRepositoryTreeInput) -> dict[str, Any]:
    page, size = _position(args.after) if args.after else (1, args.first)
    target = await tree_target(ctx, args.url, args.project_id, args.ref, args.folder_path)
    project, ref, folder = target.project, target.ref, target.folder
    params: dict[str, Any] = {"per_page": size, "page": page}
    if ref:
        params["ref"] = ref
    if folder:
        params["path"] = folder
    if args.recursive:
        params["recursive"] = "true"
    try:
        answer = await ctx.gitlab.rest(
            "GET", TREE_ROUTE, path_params={"id": encode_project(project)}, params=params
        )
    except GitLabNotFound as err:
        if "tree" not in err.message.lower() or not ref:
            raise not_found(project_not_found_message(project, ctx.call.caller.credential)) from None
        check = await check_ref(ctx, project, ref)
        hint = check.hint(ref, takes_sha=True) if check.exists is False else f"'{ref}' names no commit here."
        raise not_found(
            f"Ref '{ref}' not found in project '{project}': {hint} Call again with an existing "
            "branch, tag or commit SHA, or without `ref` for the default branch.",
            kind="ref_not_found",
            ref=ref,
            nearest_refs=list(check.nearest),
        ) from None
    items = answer if isinstance(answer, list) else []
    listed = [e for e in map(_entry, items) if e is not None]
    rules = await exclusion_rules(ctx, ctx.gitlab, project_ref(project)) if listed else ()
    entries = [e for e in listed if not _excluded(rules, e)]
    more = len(items) >= size
    out: dict[str, Any] = {
        "ref": ref,
        "folder_path": folder,
        "entries": entries,
        "page_info": {"has_next_page": more, "end_cursor": _cursor(page + 1, size) if more else None},
    }
    if len(entries) < len(listed):
        out["excluded_from_ai_context"] = len(listed) - len(entries)
    if not items and page == 1 and folder:
        out["system_instruction"] = (
            f"Nothing listed: '{folder}' is no folder at this ref (a file, a misspelt or moved "
            "folder, or an empty one). Paths are case-sensitive; list its parent folder (or the root) to "
            "find it."
        )
    return out


DESCRIPTION = f"""\
List the files and folders of a project's repository at a ref (default: the default branch), \
by project_id or by the URL of the project or of a folder (`/-/tree/<ref>/<folder>`) on this GitLab: \
one folder's entries (`folder_path`, default the root), or with `recursive` every path below it. Each \
entry has its `path` (get_repository_file's `file_path`), `name`, `type` (`blob` a file, `tree` \
a folder, `commit` a submodule) and `mode`. Use it to find a file's real path. Files and folders \
the project excludes from AI context (GitLab Duo context exclusion rules) are left out; \
`excluded_from_ai_context` counts those of the page. {PAGING}"""

TOOLS: list[Tool] = [
    Tool(
        name="list_repository_tree",
        title="List a repository's files",
        description=DESCRIPTION,
        input_model=ListRepositoryTreeInput,
        output_model=ListRepositoryTreeOutput,
        handler=list_repository_tree,
        annotations=READ_ONLY,
        toolset="repository",
        operations=(GET_REPOSITORY_FILE_EXCLUSIONS,),
    )
]
