"""The end of a file in a job's artifacts archive, without knowing its size first
(``get_artifact_file`` with ``tail_bytes``).

GitLab extracts the file (``GET /projects/:id/jobs/:job_id/artifacts/*artifact_path``) and serves
it from its first byte. The request asks for the last bytes with ``Range: bytes=-N`` (RFC 9110
§14.1.2), and reads GitLab's ``206`` when it honours it; when it does not (Workhorse streams an
entry it extracts whole), the answer is read as it streams keeping only its last bytes, as the job
log's ``tail_lines`` does: memory stays bounded whatever the file's size, and the file's size is
known at its end. The returned window starts at a whole UTF-8 character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.gitlab.errors import GitLabBadRequest
from gateway.gitlab.urls import JobRef, encode_project
from gateway.tools.context import ToolContext

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Tail:
    """The file's last bytes: ``content`` starts at byte ``start`` of a file of ``total`` bytes
    (None when GitLab honoured the range without saying the size); ``sample`` is what to sniff
    for binary content (the file's first bytes when they were read, else the tail's)."""

    content: bytes
    start: int
    total: int | None
    sample: bytes


async def read_tail(
    ctx: ToolContext, target: JobRef, job_id: int, encoded_path: str, size: int, *, sample_bytes: int
) -> Tail:
    """The last ``size`` bytes (fewer when they would split a character) of the artifact file.

    Raises:
        the typed errors of :meth:`GitLabSession.stream` (a 404 for a missing file).
    """
    headers = {"Range": f"bytes=-{size}", "Accept-Encoding": "identity"}
    kept = bytearray()
    head = bytearray()
    pos = 0
    start: int | None = None
    total: int | None = None
    try:
        async with ctx.gitlab.stream(
            "/projects/{id}/jobs/{job_id}/artifacts/",
            path_params={"id": encode_project(target.project), "job_id": job_id},
            suffix=encoded_path,
            headers=headers,
        ) as body:
            honoured = _CONTENT_RANGE.fullmatch((body.headers.get("content-range") or "").strip())
            if honoured:
                start = int(honoured[1])
                total = int(honoured[3]) if honoured[3] != "*" else None
            async for chunk in body.chunks():
                if not honoured and len(head) < sample_bytes:
                    head += chunk[: sample_bytes - len(head)]
                pos += len(chunk)
                kept += chunk
                if len(kept) > size:
                    del kept[: len(kept) - size]
    except GitLabBadRequest as err:
        if err.status != 416:
            raise
        return Tail(b"", 0, 0, b"")  # an empty file: no byte to start the range at
    if start is None:  # the whole file was sent: its size is what arrived
        total = pos
        start = pos - len(kept)
    else:
        start = (total - len(kept)) if total is not None else start
    skip = 0
    if start > 0:
        while skip < min(3, len(kept)) and (kept[skip] & 0xC0) == 0x80:
            skip += 1
    content = bytes(kept[skip:])
    return Tail(content, start + skip, total, bytes(head) if head else content[:sample_bytes])
