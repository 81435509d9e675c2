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
  SHA is served from the cache with no GitLab request while GitLab confirmed within
  ``cache.access_check_seconds`` (30 s) that this credential still reads the project's code, and
  otherwise after one small request that confirms it and re-reads the exclusion rules; a branch,
  tag or ``HEAD`` is always resolved again, and the
  content it returned is cached under the SHA it resolved to, so pinning ``ref`` to
  ``commit_sha`` reads the next windows from the cache and from the same version.
- Windows abut exactly, and a cut line ends on a character boundary
  (``gateway.tools.repository.file_window``).
- A blob URL's branch with ``/`` is split like GitLab's web UI (``gateway.gitlab.blob_urls``); a
  ``#L10-20`` anchor opens the window there; a ``ref`` or ``file_path`` given with the url
  settles the split without fetching ref names.
- Files GitLab truncated (``rawSize`` larger than the text returned) say so in ``metadata``
  (``fetch_truncated``) and in ``system_instruction``, with both sizes in bytes.
- GitLab CE, and EE before 18.2, have no ``Project.duoContextExclusionSettings``: they are sent
  the documents without it (no rules, as on CE itself), chosen by GitLab's version and edition.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gateway.cache import credential_key
from gateway.errors import bad_request
from gateway.gitlab.blob_urls import BRANCH_NAMES, is_full_sha, parse_blob_url
from gateway.tools.arguments import PROJECT_ALIASES, OptionalProjectId, OptionalText
from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Tool, ToolInput, ToolOutput, ToolResult
from gateway.tools.repository.checks import check_excluded, check_project
from gateway.tools.repository.file_window import MAX_WINDOW_BYTES, CapReason, Window, window
from gateway.tools.repository.reads import (
    GET_REPOSITORY_FILE,
    GET_REPOSITORY_FILE_EXCLUSIONS,
    FileRead,
    Missing,
    exclusion_rules,
    fetch_file,
    missing_error,
)
from gateway.tools.repository.target import MAX_LIMIT, FileTarget, resolve_target

DEFAULT_LIMIT = 500

# -- arguments -------------------------------------------------------------------------------


class GetRepositoryFileInput(ToolInput):
    """Give url, or project_id and file_path (and ref, HEAD by default); offset and limit pick the lines."""

    argument_aliases = PROJECT_ALIASES

    url: OptionalText = Field(
        None,
        description=(
            "The file's URL on this GitLab, e.g. "
            "https://gitlab.example.com/group/project/-/blob/main/README.md (blob, raw or blame; "
            "`?ref_type=` and a `#L10-20` anchor are honoured). Give this, or project_id and file_path "
            "(and ref, optionally)."
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
        "Required without url.",
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
    start: int = Field(description="First returned line, 1-based: `offset` + 1.")
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
    target = await resolve_target(ctx, session, args, blob_url)
    settings = ctx.settings.cache
    files = ctx.services.caches.get("blobs", ttl=settings.blob_ttl_seconds)
    fetched: list[FileRead] = []

    async def fetch() -> FileRead:
        read = await fetch_file(ctx, session, target)
        fetched.append(read)
        return read

    try:
        if is_full_sha(target.ref) and target.ref_type is None:
            sha = target.ref.lower()
            key = credential_key(session.credential, "file", *target.project.key, sha, target.path)
            read = await files.get_or_load(key, fetch)
        else:
            read = await fetch()
    except Missing as missing:
        check_project(target, missing.project_id)
        check_excluded(target, missing.rules)
        raise missing_error(target, missing) from None
    check_project(target, read.project_id)
    rules = read.rules
    if not fetched:
        # Served from the content cache: only while GitLab confirmed, within the last
        # cache.access_check_seconds, that this credential still reads this project's code (a
        # revoked token or a removed member must not keep reading what it once read), and with
        # exclusion rules as fresh (a maintainer may have excluded the file since).
        rules = await exclusion_rules(ctx, session, target.project)
    check_excluded(target, rules)
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
        reference_hint="Or pass project_id, file_path and ref.",
        operations=(
            GET_REPOSITORY_FILE,
            GET_REPOSITORY_FILE_EXCLUSIONS,
            BRANCH_NAMES,
        ),
    )
]
