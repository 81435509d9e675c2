"""An artifacts archive's entries from its zip directory, read with HTTP ``Range`` on the archive
download (``GET /projects/:id/jobs/:job_id/artifacts``; :mod:`gateway.gitlab.ranged`), for a
GitLab without the artifacts tree API (before 18.8) or an archive uploaded without metadata.

The entries are answered as GitLab's tree answers them, so that a listing reads the same from
either: sorted by path, with an entry for every folder (GitLab's metadata, which the tree reads,
is written that way by Workhorse, ``workhorse/internal/zipartifacts/metadata.go``: missing parent
folders added, paths sorted), where the zip itself may keep its own order and no folder entries.

Its last :data:`~gateway.gitlab.zip_directory.TAIL_BYTES` (65,633: the end records, and for most
archives the whole directory), then, when the directory starts before them, exactly the
directory's bytes. A directory larger than :data:`MAX_DIRECTORY_BYTES` is not read. When GitLab
ignores ``Range`` and sends the whole archive, an archive up to that size is read whole and listed,
and a larger one is not read at all (its ``Content-Length`` says so) or cut at the bound: the
answer says so. So one listing reads at most 65,633 + 20 MiB of the archive.
"""

from __future__ import annotations

import posixpath

from gateway.gitlab.errors import GitLabBadRequest, GitLabUpstreamError
from gateway.gitlab.ranged import RangeRead, read_range
from gateway.gitlab.urls import encode_project
from gateway.gitlab.zip_directory import TAIL_BYTES, ZipEntry, ZipFormatError, entries, locate
from gateway.tools.ci.job_read import JobAnswer
from gateway.tools.context import ToolContext

ARCHIVE_ROUTE = "/projects/{id}/jobs/{job_id}/artifacts"
#: The most of an archive's zip directory read for one listing (GitLab's own MCP tool reads
#: archives of up to 20 MB): about 200,000 entries of 60-character paths.
MAX_DIRECTORY_BYTES = 20 * 1024 * 1024


def as_tree(found: list[ZipEntry]) -> list[ZipEntry]:
    """``found`` as GitLab's artifacts tree lists it: a folder entry (``path/``) for every parent
    folder, each path once, sorted (Go's ``sort.Strings``: by bytes, which for UTF-8 is the order
    of code points, as Python sorts ``str``)."""
    by_path: dict[str, ZipEntry] = {}
    for entry in found:
        path = entry.path.lstrip("/")
        if not path:
            continue
        by_path.setdefault(path, ZipEntry(path, entry.size, entry.is_dir or path.endswith("/")))
        folder = posixpath.dirname(path.rstrip("/"))
        while folder and folder + "/" not in by_path:
            by_path[folder + "/"] = ZipEntry(folder + "/", 0, True)
            folder = posixpath.dirname(folder)
    return [by_path[p] for p in sorted(by_path)]


async def read_directory(
    ctx: ToolContext, project: str, job: JobAnswer
) -> tuple[list[ZipEntry] | None, str | None]:
    """The archive's entries (:func:`as_tree`), or None and why they cannot be read.

    Raises:
        GitLabError: GitLab failing (a 404 included: the caller tells what it means).
    """
    params: dict[str, str | int] = {"id": encode_project(project), "job_id": job.id}
    try:
        tail = await read_range(
            ctx.gitlab, ARCHIVE_ROUTE, path_params=params, suffix=TAIL_BYTES, max_bytes=MAX_DIRECTORY_BYTES
        )
    except GitLabBadRequest as err:
        if err.status != 416:
            raise
        return None, "The artifacts archive is empty (GitLab answered 416 to a read of its end)."
    except GitLabUpstreamError as err:
        if err.status is not None and 300 <= err.status < 400:
            return None, (
                f"GitLab answered the archive download with a redirect ({err.status}) to its object "
                "storage, which the gateway does not follow (it sends requests to the configured GitLab "
                "only), and this GitLab has no artifacts tree API (GitLab 18.8 and later have one): the "
                "archive's files cannot be listed here. Read a file whose path you know with "
                "get_artifact_file."
            )
        raise
    if not tail.honoured and tail.cut:
        size = f"{tail.total} bytes" if tail.total is not None else f"over {MAX_DIRECTORY_BYTES} bytes"
        return None, (
            f"GitLab ignored the HTTP Range request and sent the whole archive ({size}), and the "
            f"gateway reads at most {MAX_DIRECTORY_BYTES} bytes of an archive to list it, so it stopped "
            "there: the files cannot be listed here. GitLab 18.8 and later list them without reading "
            "the archive (the artifacts tree API); a proxy in front of GitLab may be dropping `Range`."
        )
    try:
        where = locate(tail.content, tail.start)
        if where.size > MAX_DIRECTORY_BYTES:
            return None, (
                f"The archive's zip directory is {where.size} bytes ({where.entries} entries), more than "
                f"the {MAX_DIRECTORY_BYTES} bytes the gateway reads to list an archive."
            )
        data = await _directory_bytes(ctx, params, tail, where.offset, where.size)
        if data is None:
            return None, (
                "GitLab ignored the HTTP Range request for the archive's zip directory: the files cannot "
                "be listed here."
            )
        return as_tree(list(entries(data))), None
    except ZipFormatError as err:
        return None, f"The artifacts archive is not a readable zip ({err})."


async def _directory_bytes(
    ctx: ToolContext, params: dict[str, str | int], tail: RangeRead, offset: int, size: int
) -> bytes | None:
    if offset >= tail.start:  # within what the first read brought
        at = offset - tail.start
        return tail.content[at : at + size]
    if size == 0:
        return b""
    read = await read_range(
        ctx.gitlab, ARCHIVE_ROUTE, path_params=params, first=offset, last=offset + size - 1, max_bytes=size
    )
    return read.content if read.honoured and len(read.content) == size else None
