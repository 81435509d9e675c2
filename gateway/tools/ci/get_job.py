"""``get_job``: one CI job and, on request, its log (cleaned) and its artifacts.

GitLab's built-in MCP server has the tool (gitlabhq ``app/services/mcp/tools/jobs/``): the same
arguments ``id`` (here ``project_id``, ``id`` accepted too), ``job_id``, ``include`` (``log``,
``artifacts``), ``byte_offset``, ``byte_limit``;
the same log ``metadata {total_bytes, returned {start, end}, truncated}`` and "Call again with
{"byte_offset": N}" hint. Where this gateway goes further:

- ``url`` names the job too (``<GitLab>/<project>/-/jobs/<id>``, only on the configured GitLab).
- Both facets in one call.
- The log is cleaned as GitLab's job page shows it (colours and erase-line escapes gone, ``\\r``
  progress resolved, section markers removed; :mod:`gateway.gitlab.job_log`) and its collapsible
  ``sections`` are returned with their lines and durations.
- ``tail_lines``: the last lines of the log, read as it streams (whatever its size).
- Windows end on a line boundary (:mod:`gateway.tools.ci.log_reads`), so successive windows
  join into exactly the cleaned log and no multi-byte character is split.
- A log the token may not read (403 on ``/trace``) is told apart from a missing job.

Requests: ``GET /projects/:id/jobs/:job_id``, then for ``log`` ``GET .../trace`` (streamed).
Nothing is cached: the job's status changes until it finishes, and a finished job's log could be
cached only by holding whole logs (hundreds of MB) or re-reading them anyway; a log read is one
request that stops as soon as the window is full.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from gateway.errors import ToolError, bad_request
from gateway.gitlab.errors import GitLabNotFound, GitLabUnauthorized
from gateway.gitlab.job_log import LogSection
from gateway.gitlab.urls import JobRef, encode_project
from gateway.tools.arguments import (
    OptionalText,
    schema_extra,
)
from gateway.tools.ci.artifact_entries import ArtifactFiles, list_files
from gateway.tools.ci.job_read import (
    JobAnswer,
    JobArtifact,
    JobFields,
    JobInput,
    artifacts,
    job_fields,
    job_not_found,
    job_target,
    read_job,
)
from gateway.tools.ci.log_reads import MAX_TAIL_CHARS, CapReason, LogRead, read_tail, read_window
from gateway.tools.context import ToolContext
from gateway.tools.pagination import Cursor, PageSize, after_field, first_field
from gateway.tools.registry import READ_ONLY, Tool

#: GitLab's own cap on one read of a log (``Gitlab::Ci::Trace::Stream::LIMIT_SIZE``, 500 KB).
MAX_BYTE_LIMIT = 512_000
DEFAULT_BYTE_LIMIT = 65_536
MAX_TAIL_LINES = 5_000
#: The most sections returned (a tail keeps the last ones: nearest the failure).
MAX_SECTIONS = 100
#: The longest artifact_filter (a path in an archive, or a glob over one).
MAX_FILTER_CHARS = 1024
TRACE_ROUTE = "/projects/{id}/jobs/{job_id}/trace"

Include = Literal["log", "artifacts"]


class GetJobInput(JobInput):
    """Give url, or project_id and job_id; add include: ["log"] and/or ["artifacts"]."""

    include: list[Include] = Field(
        default_factory=list,
        max_length=2,
        description="Facets to add: `log` (the job's log, cleaned, with its sections) and/or `artifacts` "
        "(the files the job kept: its archives, and the paths inside its artifacts archive). Omit for "
        "the job alone.",
    )
    byte_offset: Annotated[int, Field(ge=0)] | SkipJsonSchema[None] = Field(
        None,
        description="Raw byte offset in the log to start from (include log). Default 0. Use the "
        "`byte_offset` a previous call suggested.",
        json_schema_extra=schema_extra(),
    )
    byte_limit: Annotated[int, Field(ge=1, le=MAX_BYTE_LIMIT)] | SkipJsonSchema[None] = Field(
        None,
        description=f"Most raw log bytes to read (include log). Default {DEFAULT_BYTE_LIMIT}, max "
        f"{MAX_BYTE_LIMIT}. The window ends on a line boundary, so it may return fewer.",
        json_schema_extra=schema_extra(),
    )
    tail_lines: Annotated[int, Field(ge=1, le=MAX_TAIL_LINES)] | SkipJsonSchema[None] = Field(
        None,
        description=f"Return the log's last N lines instead of a byte window (include log; max "
        f"{MAX_TAIL_LINES}). The quickest way to see why a job failed. Not with byte_offset/byte_limit.",
        json_schema_extra=schema_extra(),
    )

    artifact_filter: OptionalText = Field(
        None,
        description="Only the archive's paths matching a glob (`*.log`; `*` crosses `/`) or a prefix "
        "(`logs/`). Include artifacts.",
    )
    first: PageSize = first_field("`artifact_files`")
    after: Cursor = after_field("`artifact_files`")

    @field_validator("include", mode="before")
    @classmethod
    def _facets(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if value is None:
            return []
        if isinstance(value, list):
            unknown = [v for v in value if v not in ("log", "artifacts")]
            if unknown:
                raise ValueError(f"unknown facet {unknown[0]!r}; accepts log and artifacts")
            return list(dict.fromkeys(value))
        return value

    @field_validator("byte_offset", "byte_limit", "tail_lines")
    @classmethod
    def _needs_log(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and "include" in info.data and "log" not in info.data["include"]:
            raise ValueError('applies to the log only: add include: ["log"]')
        return value

    @field_validator("artifact_filter", "after")
    @classmethod
    def _needs_artifacts(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and "include" in info.data and "artifacts" not in info.data["include"]:
            raise ValueError('applies to the artifacts archive only: add include: ["artifacts"]')
        if value is not None and info.field_name == "artifact_filter" and len(value) > MAX_FILTER_CHARS:
            raise ValueError(f"is {len(value)} characters long; a path or glob of at most {MAX_FILTER_CHARS}")
        return value


# -- result ----------------------------------------------------------------------------------------


class _Returned(BaseModel):
    start: int = Field(description="Raw byte offset of the first byte returned.")
    end: int = Field(description="Raw byte offset just past the last byte returned.")


class _LogMetadata(BaseModel):
    total_bytes: int | None = Field(
        description="The raw log's size in bytes (null when GitLab did not say "
        "and the read stopped before the end)."
    )
    returned: _Returned
    truncated: bool = Field(description="True when content is not the whole log.")
    first_line: int = Field(description="Number of content's first line, counted as the sections' lines are.")
    total_lines: int | None = Field(description="Cleaned lines in the whole log (tail_lines only).")
    cap_reason: CapReason | None = Field(
        description="line_cut: a line longer than byte_limit was cut at a character boundary; "
        "max_chars: fewer lines than tail_lines, to stay within the size limit; null otherwise."
    )
    sections_omitted: int = Field(description=f"Sections left out beyond the {MAX_SECTIONS} returned.")
    bytes_read: int = Field(
        description="Raw log bytes GitLab sent for this read. GitLab serves a log only whole, from its "
        "start: a window costs every byte up to its end, tail_lines the whole log."
    )


class _Section(BaseModel):
    name: str = Field(
        description="The section's name, e.g. `step_script`, `prepare_executor`, or one the job's script "
        "opened."
    )
    header: str = Field(description="The header line shown on the job page.")
    first_line: int
    last_line: int
    duration_seconds: int | None = Field(description="From section_start to section_end; null while open.")
    collapsed: bool
    open: bool = Field(
        description="True when the log ended inside the section (the job stopped there, or is still running)."
    )


class _Next(BaseModel):
    byte_offset: int
    byte_limit: int


class JobLog(BaseModel):
    content: str = Field(description="The log's lines as GitLab's job page shows them (escapes removed).")
    sections: list[_Section] = Field(
        description="Collapsible sections met by the read, in order. Line numbers count the cleaned lines "
        "from where the read began: byte_offset for a window (content's first line is first_line), the "
        "log's start for tail_lines."
    )
    metadata: _LogMetadata
    next: _Next | None = Field(None, description="Arguments to call again with for what follows.")
    system_instruction: str | None = Field(None, description="What to do next, for the model.")


class GetJobOutput(JobFields):
    """The job, and the facets asked for."""

    log: JobLog | None = Field(None, description="Present with include log.")
    artifacts: list[JobArtifact] | None = Field(
        None, description="Present with include artifacts: the archives and reports the job kept."
    )
    artifact_files: ArtifactFiles | None = Field(
        None,
        description="Present with include artifacts when the job kept an artifacts archive: the paths "
        "inside it (read one with get_artifact_file and `artifact_path`).",
    )


# -- the handler -----------------------------------------------------------------------------------


async def get_job(ctx: ToolContext, args: GetJobInput) -> dict[str, Any]:
    if args.tail_lines is not None and (args.byte_offset is not None or args.byte_limit is not None):
        given = [n for n in ("byte_offset", "byte_limit") if getattr(args, n) is not None]
        raise bad_request(
            f"tail_lines reads the end of the log and {'/'.join(given)} a byte window of it: give one or "
            "the other, not both.",
            invalid_arguments=["tail_lines", *given],
        )
    target = job_target(ctx, args.url, args.project_id, args.job_id, project_arg="project_id")
    job = await read_job(ctx, target)
    out: dict[str, Any] = job_fields(job)
    if "log" in args.include:
        out["log"] = await _log(ctx, args, target.project, job)
    if "artifacts" in args.include:
        out["artifacts"] = artifacts(job)
        if job.has_archive:
            out["artifact_files"] = await list_files(
                ctx, target.project, job, pattern=args.artifact_filter, first=args.first, after=args.after
            )
    return out


async def _log(ctx: ToolContext, args: GetJobInput, project: str, job: JobAnswer) -> dict[str, Any]:
    limit = args.byte_limit or DEFAULT_BYTE_LIMIT
    try:
        async with ctx.gitlab.stream(
            TRACE_ROUTE, path_params={"id": encode_project(project), "job_id": job.id}
        ) as body:
            if args.tail_lines is not None:
                read = await read_tail(body.chunks(), args.tail_lines)
            else:
                read = await read_window(
                    body.chunks(),
                    args.byte_offset or 0,
                    limit,
                    content_length=body.content_length,
                    running=job.running,
                )
    except GitLabUnauthorized as err:
        if err.status != 403:
            raise
        # The same token just read the job, so this is the log's own permission (read_build_trace).
        raise ToolError(
            "unauthorized",
            f"Job {job.id}'s log is not accessible: this token may read the job but not its log "
            "(GitLab answered 403 for the log: the project does not let this user read job logs, "
            "e.g. a Guest, or a non-member where the project's pipelines are not public). The job "
            'itself can still be read: call again without include: ["log"].',
            job_id=job.id,
            kind="log_forbidden",
        ) from None
    except GitLabNotFound as err:
        raise job_not_found(JobRef(project, job.id), err, ctx.gitlab.credential) from None
    return _log_payload(read, job, limit, tail=args.tail_lines is not None)


def _section(s: LogSection) -> dict[str, Any]:
    return {
        "name": s.name,
        "header": s.header,
        "first_line": s.first_line,
        "last_line": s.last_line,
        "duration_seconds": s.duration_seconds,
        "collapsed": s.collapsed,
        "open": s.open,
    }


def _log_payload(read: LogRead, job: JobAnswer, limit: int, *, tail: bool) -> dict[str, Any]:
    sections = read.sections
    omitted = max(0, len(sections) - MAX_SECTIONS)
    sections = sections[-MAX_SECTIONS:] if tail else sections[:MAX_SECTIONS]
    truncated = read.start > 0 or read.more
    metadata: dict[str, Any] = {
        "total_bytes": read.total_bytes,
        "returned": {"start": read.start, "end": read.end},
        "truncated": truncated,
        "first_line": read.first_line,
        "total_lines": read.total_lines,
        "cap_reason": read.cap_reason,
        "sections_omitted": omitted,
        "bytes_read": read.bytes_read,
    }
    out: dict[str, Any] = {"content": read.content, "sections": [_section(s) for s in sections]}
    notes: list[str] = []
    if read.more:
        remaining = (
            f" Remaining: {read.total_bytes - read.end} bytes." if read.total_bytes is not None else ""
        )
        out["next"] = {"byte_offset": read.end, "byte_limit": limit}
        if read.unfinished_line:
            notes.append(f"The job is {job.status}: its last line is still being written and was left out.")
        notes.append(f'Log truncated.{remaining} Call again with {{"byte_offset": {read.end}}}.')
    elif job.running and not tail:
        notes.append(
            f"The job is {job.status}: its log grows. For what it writes next, call again with "
            f'{{"byte_offset": {read.end}}}.'
        )
    if tail and read.start > 0:
        before = max(0, read.start - limit)
        notes.append(
            f"These are the log's last {read.lines} lines (of {read.total_lines}). For the lines before "
            f'them, call again with {{"byte_offset": {before}, "byte_limit": {read.start - before}}}.'
        )
    if read.cap_reason == "max_chars":
        notes.append(f"Fewer lines than asked were returned, to stay within {MAX_TAIL_CHARS} characters.")
    elif read.cap_reason == "line_cut":
        notes.append("A line longer than the window was cut at a character boundary.")
    if read.start == read.end and read.total_bytes is not None and read.start >= read.total_bytes > 0:
        notes.append(f"byte_offset is at or past the end of the log ({read.total_bytes} bytes).")
    out["metadata"] = metadata
    if notes:
        out["system_instruction"] = " ".join(notes)
    return out


DESCRIPTION = """\
Get a CI/CD job of a GitLab project: status, stage, failure_reason (e.g. `script_failure`), \
duration, times, pipeline_id and web_url. Name it with `url` (a `/-/jobs/<id>` link) or `project_id` \
+ `job_id`.

Add `include: ["log"]` for its log, cleaned as GitLab's job page shows it (no colour codes or \
progress redraws), with its `sections` (name, lines, duration). To see why a job failed, ask for \
`tail_lines` (e.g. 50): the last lines, however large the log. To read it all, page with \
`byte_offset`/`byte_limit` (raw bytes; windows end on a line boundary); while `next` is present, \
call again with it. A window far into a big log costs reading all before it (`metadata.bytes_read`): \
prefer tail_lines for the end. Add `include: ["artifacts"]` to list the files the job kept, and in \
`artifact_files` the paths inside its artifacts archive (filter with `artifact_filter`, e.g. \
`*.log`); read one with get_artifact_file.
"""

TOOLS: list[Tool] = [
    Tool(
        name="get_job",
        title="Get job",
        description=DESCRIPTION,
        input_model=GetJobInput,
        output_model=GetJobOutput,
        handler=get_job,
        annotations=READ_ONLY,
        toolset="ci",
        reference_hint="Or pass `project_id` and `job_id`.",
    )
]
