"""``get_artifact_file``: one text file from a job's artifacts archive, in byte windows.

GitLab's built-in MCP server has the tool (gitlabhq ``app/services/mcp/tools/jobs/``): the same
arguments (``url`` or ``project_id`` + ``job_id``, ``artifact_path``, ``byte_offset``,
``byte_limit`` up to 1 MiB), the same ``metadata {total_bytes, returned {start, end}, truncated}``,
the "Call again with" hint, binary files refused with their type and a link. GitLab extracts the
file itself (``GET /projects/:id/jobs/:job_id/artifacts/*artifact_path``,
https://docs.gitlab.com/api/job_artifacts/#download-a-single-artifact-file-by-job-id); the gateway
never handles the archive, and reads the answer as it streams, stopping once the window is full.

Each failure has its own message: a path that tries to leave the archive (``..``, an absolute path,
a backslash, percent-encoding) is refused before any request; a job without an archive, or whose
artifacts expired, is told from the job's own fields; a path missing from the archive is GitLab's 404,
answered with the archive's nearest paths (:mod:`gateway.tools.ci.artifact_entries`).
A window never splits a UTF-8 character: it starts at the next whole character and ends before a
cut one, and ``returned`` gives the real bytes.
"""

from __future__ import annotations

import mimetypes
import re
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from gateway.errors import ToolError, bad_request, not_found
from gateway.gitlab.errors import GitLabNotFound
from gateway.gitlab.urls import JobRef, encode_project
from gateway.tools.arguments import (
    PROJECT_ALIASES,
    OptionalPositiveId,
    OptionalProjectId,
    OptionalText,
    schema_extra,
)
from gateway.tools.ci.artifact_entries import nearest_paths
from gateway.tools.ci.artifact_tail import read_tail
from gateway.tools.ci.job_read import JobAnswer, job_target, read_job
from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Tool, ToolInput, ToolOutput

MAX_BYTE_LIMIT = 1024 * 1024
DEFAULT_BYTE_LIMIT = 65_536
#: Bytes sniffed for binary content (git's and libgit2's window).
SAMPLE_BYTES = 8000
ARTIFACT_ROUTE = "/projects/{id}/jobs/{job_id}/artifacts/"

_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"%PDF", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
    (b"\x7fELF", "application/x-executable"),
)


class GetArtifactFileInput(ToolInput):
    """Give url, or project_id and job_id; and artifact_path (unless the url names the file)."""

    url: OptionalText = Field(
        None,
        description="GitLab URL of the job, e.g. https://gitlab.com/group/project/-/jobs/123 (or of the "
        "file: `.../-/jobs/123/artifacts/file/<path>`). Provide this, or project_id and job_id.",
    )
    argument_aliases = PROJECT_ALIASES

    project_id: OptionalProjectId = Field(
        None, description="ID or full path of the project. Required without url."
    )
    job_id: OptionalPositiveId = Field(None, description="ID of the job. Required without url.")
    artifact_path: OptionalText = Field(
        None,
        description="Path of the file inside the artifacts archive, e.g. `coverage/index.html`. "
        "Required unless the url names the file.",
    )
    byte_offset: int = Field(0, ge=0, description="Byte offset to start reading the file from. Default 0.")
    byte_limit: int = Field(
        DEFAULT_BYTE_LIMIT,
        ge=1,
        le=MAX_BYTE_LIMIT,
        description=f"Most bytes to return. Default {DEFAULT_BYTE_LIMIT}, max {MAX_BYTE_LIMIT}.",
    )
    tail_bytes: Annotated[int, Field(ge=1, le=MAX_BYTE_LIMIT)] | SkipJsonSchema[None] = Field(
        None,
        description=f"Return the file's last N bytes instead of a window from byte_offset (max "
        f"{MAX_BYTE_LIMIT}; the size need not be known: the end of a log or a report). Not with "
        "byte_offset/byte_limit.",
        json_schema_extra=schema_extra(),
    )


class _Returned(BaseModel):
    start: int
    end: int


class _Metadata(BaseModel):
    total_bytes: int | None = Field(description="The file's size (null when GitLab did not say).")
    returned: _Returned
    truncated: bool = Field(description="True when bytes remain after returned.end.")


class _Next(BaseModel):
    byte_offset: int
    byte_limit: int


class GetArtifactFileOutput(ToolOutput):
    path: str = Field(description="The file's path inside the archive.")
    job_id: int
    metadata: _Metadata
    next: _Next | None = Field(None, description="Arguments to call again with when bytes remain.")
    system_instruction: str | None = Field(None, description="What to do next, for the model.")
    content: str = Field(description="The file's text in the window.")


def _refused(message: str, kind: str) -> ToolError:
    return bad_request(message, kind=kind, invalid_arguments=["artifact_path"])


def check_artifact_path(path: str) -> str:
    """``path`` as a relative path inside the archive, or ``bad_request`` saying what is wrong.

    A literal ``%xx`` in a file name is refused with the encoded paths: the one way to tell a path
    encoded by the caller from one GitLab would decode a second time."""
    shown = path if len(path) <= 200 else path[:199] + "…"
    if not path.strip():
        raise _refused(
            "artifact_path must not be empty: give the file's path inside the archive.", "empty_path"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise _refused(
            f"artifact_path {shown!r} contains control characters; give a plain relative path.",
            "control_characters",
        )
    if "\\" in path:
        raise _refused(
            f"artifact_path {shown!r} contains a backslash; paths inside an artifacts archive use `/`.",
            "backslash",
        )
    if _ENCODED.search(path):
        raise _refused(
            f"artifact_path {shown!r} contains percent-encoding (`%xx`); give the path decoded, as it "
            "appears in the archive (the gateway encodes it).",
            "encoded_path",
        )
    if path.startswith("/") or re.match(r"[A-Za-z]:", path):
        raise _refused(
            f"artifact_path {shown!r} is absolute; give the path relative to the archive's root, "
            "e.g. `coverage/index.html`.",
            "absolute_path",
        )
    segments = path.split("/")
    if any(s in ("..", ".") for s in segments):
        raise _refused(
            f"artifact_path {shown!r} contains a `..` or `.` segment: paths must stay inside the archive "
            "and name the file directly.",
            "path_traversal",
        )
    if path.endswith("/") or "" in segments:
        raise _refused(
            f"artifact_path {shown!r} names a directory or has an empty segment; name a file.", "directory"
        )
    return path


def _file_type(path: str, sample: bytes) -> str:
    for magic, kind in _MAGIC:
        if sample.startswith(magic):
            return kind
    guessed, _ = mimetypes.guess_type(path)
    return guessed or "binary"


def _is_binary(sample: bytes) -> bool:
    if b"\x00" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as err:
        # A character cut by the end of the sample is still text.
        return not (err.start >= len(sample) - 3 and err.reason == "unexpected end of data")
    return False


async def get_artifact_file(ctx: ToolContext, args: GetArtifactFileInput) -> dict[str, Any]:
    windowed = [n for n in ("byte_offset", "byte_limit") if n in args.model_fields_set]
    if args.tail_bytes is not None and windowed:
        raise bad_request(
            f"tail_bytes reads the end of the file and {'/'.join(windowed)} a window from its start: give "
            "one or the other, not both.",
            invalid_arguments=["tail_bytes", *windowed],
        )
    target = job_target(ctx, args.url, args.project_id, args.job_id, project_arg="project_id")
    path = args.artifact_path
    if target.artifact_path is not None:
        if path is not None and path.lstrip("/") != target.artifact_path:
            raise bad_request(
                f"artifact_path is {path!r} but the url names {target.artifact_path!r}; give one of them."
            )
        path = target.artifact_path
    if path is None:
        raise bad_request("artifact_path is required: the file's path inside the job's artifacts archive.")
    path = check_artifact_path(path)
    job = await read_job(ctx, target)
    if not job.has_archive:
        raise _no_archive(job)
    if args.tail_bytes is not None:
        return await _read_end(ctx, target, job, path, args.tail_bytes)
    return await _read(ctx, target, job, path, args.byte_offset, args.byte_limit)


def _encoded(path: str) -> str:
    return "/".join(quote(s, safe="") for s in path.split("/"))


def _binary(path: str, job: JobAnswer, sample: bytes, total: int | None) -> ToolError:
    size = f"Size: {total} bytes. " if total is not None else ""
    return bad_request(
        f"Artifact file '{path}' in job {job.id} is binary ({_file_type(path, sample)}) and cannot "
        f"be returned as text. {size}It can be viewed at {job.web_url}/artifacts/raw/{_encoded(path)}.",
        kind="binary",
        path=path,
        job_id=job.id,
        size_bytes=total,
    )


async def _read_end(ctx: ToolContext, target: JobRef, job: JobAnswer, path: str, size: int) -> dict[str, Any]:
    try:
        tail = await read_tail(ctx, target, job.id, _encoded(path), size, sample_bytes=SAMPLE_BYTES)
    except GitLabNotFound:
        raise await _file_not_found(ctx, target, job, path) from None
    if _is_binary(tail.sample):
        raise _binary(path, job, tail.sample, tail.total)
    end = tail.start + len(tail.content)
    out: dict[str, Any] = {
        "path": path,
        "job_id": job.id,
        "metadata": {
            "total_bytes": tail.total,
            "returned": {"start": tail.start, "end": end},
            "truncated": False,
        },
    }
    if tail.start > 0:
        before = max(0, tail.start - size)
        of = tail.total if tail.total is not None else end
        out["system_instruction"] = (
            f"These are the file's last {len(tail.content)} bytes (of {of}). "
            f'For the bytes before them, call again with {{"byte_offset": {before}, "byte_limit": '
            f"{tail.start - before}}} (without tail_bytes)."
        )
    out["content"] = tail.content.decode("utf-8", "replace")
    return out


async def _file_not_found(ctx: ToolContext, target: JobRef, job: JobAnswer, path: str) -> ToolError:
    """GitLab's 404 for a path, with the archive's nearest paths (read as get_job lists them)."""
    nearest = await nearest_paths(ctx, target.project, job, path)
    if nearest:
        listed = ", ".join(f"`{p}`" for p in nearest)
        hint = f" Nearest paths in the archive: {listed}."
    else:
        hint = ""
    return not_found(
        f"Artifact file '{path}' not found in the artifacts archive of job {job.id}.{hint} Paths are "
        'relative to the archive\'s root and case-sensitive; get_job with include: ["artifacts"] '
        "lists them (`artifact_filter` narrows the list, e.g. `*.log`).",
        kind="file_not_found",
        path=path,
        job_id=job.id,
        nearest_paths=nearest,
    )


def _no_archive(job: JobAnswer) -> ToolError:
    if job.artifacts_expired:
        return not_found(
            f"The artifacts of job {job.id} expired on {job.artifacts_expire_at} and were deleted: no file "
            "can be read from them. Run the job again to produce them anew.",
            kind="artifacts_expired",
            job_id=job.id,
        )
    return not_found(
        f"Job {job.id} has no artifacts archive (status {job.status}): it kept no files, or they were "
        'erased. get_job with include: ["artifacts"] lists what the job kept.',
        kind="no_artifacts",
        job_id=job.id,
    )


async def _read(
    ctx: ToolContext, target: JobRef, job: JobAnswer, path: str, offset: int, limit: int
) -> dict[str, Any]:
    encoded = _encoded(path)
    head = bytearray()  # the file's first bytes, sniffed for binary content
    window = bytearray()
    pos = 0
    eof = True
    try:
        async with ctx.gitlab.stream(
            ARTIFACT_ROUTE,
            path_params={"id": encode_project(target.project), "job_id": job.id},
            suffix=encoded,
        ) as body:
            total = body.content_length
            async for chunk in body.chunks():
                if len(head) < SAMPLE_BYTES:
                    head += chunk[: SAMPLE_BYTES - len(head)]
                lo = max(0, offset - pos)
                if lo < len(chunk):
                    window += chunk[lo:]
                pos += len(chunk)
                if len(head) >= SAMPLE_BYTES and _is_binary(bytes(head)):
                    break
                if len(window) >= limit + 4:  # enough to see a split character and that more remains
                    eof = False
                    break
    except GitLabNotFound:
        raise await _file_not_found(ctx, target, job, path) from None
    if _is_binary(bytes(head)):
        raise _binary(path, job, bytes(head), total)
    if total is None and eof:
        total = pos
    skip = 0
    if offset > 0:
        while skip < min(3, len(window)) and (window[skip] & 0xC0) == 0x80:
            skip += 1
    data = bytes(window[skip:])
    start = min(offset, pos) + skip
    more = False
    if len(data) > limit:
        more = True
        end = limit
        while end > limit - 3 and (data[end] & 0xC0) == 0x80:
            end -= 1
        data = data[:end]
    returned_end = start + len(data)
    truncated = more
    out: dict[str, Any] = {
        "path": path,
        "job_id": job.id,
        "metadata": {
            "total_bytes": total,
            "returned": {"start": start, "end": returned_end},
            "truncated": truncated,
        },
    }
    if truncated:
        remaining = f" Remaining: {total - returned_end} bytes." if total is not None else ""
        out["next"] = {"byte_offset": returned_end, "byte_limit": limit}
        out["system_instruction"] = (
            f'Artifact file truncated.{remaining} Call again with {{"byte_offset": {returned_end}}}.'
        )
    elif total is not None and offset >= total > 0:
        out["system_instruction"] = f"byte_offset is at or past the end of the file ({total} bytes)."
    out["content"] = data.decode("utf-8", "replace")
    return out


DESCRIPTION = """\
Read a file from inside a CI/CD job's artifacts archive as text (GitLab extracts it). Name the \
job with `url` or `project_id` + `job_id`, and the file with `artifact_path` (e.g. \
`reports/junit.xml`). List the paths in a job's archive with get_job and \
`include: ["artifacts"]`; a missing path's error names the nearest ones. Large files \
come in windows of `byte_limit` bytes (default 65536, max 1 MiB): while `next` is present, call \
again with it; `tail_bytes` reads the file's end without knowing its size. Binary files are \
refused with their type and a link; a missing file, a job \
without artifacts and expired artifacts each get their own error.
"""

TOOLS: list[Tool] = [
    Tool(
        name="get_artifact_file",
        title="Read a job artifact file",
        description=DESCRIPTION,
        input_model=GetArtifactFileInput,
        output_model=GetArtifactFileOutput,
        handler=get_artifact_file,
        annotations=READ_ONLY,
        toolset="ci",
        reference_hint="Or pass `project_id` and `job_id`.",
    )
]
