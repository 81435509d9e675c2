"""A job's artifacts archive in the stand-in: the archive download
(``GET /projects/:id/jobs/:job_id/artifacts``, a real zip of :data:`job_logs.ARTIFACT_FILES`) and
the artifacts tree (``GET /projects/:id/jobs/:job_id/artifacts/tree``,
https://docs.gitlab.com/api/job_artifacts/#list-all-files-in-the-artifacts-archive).

As GitLab serves them (switch with ``control.settings(artifacts_tree=..., artifacts_download=...)``):

- The download honours one ``Range`` (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``) with ``206`` and
  ``Content-Range``, as Workhorse's ``http.ServeContent`` and ``send-url`` do; ``whole`` ignores
  it (a proxy dropping the header); ``redirect`` answers ``302`` to a signed object-storage URL,
  as GitLab does with object storage's direct download. Each answer's ``Range`` and body size
  are in the request log (``range``, ``body_bytes``).
- The tree (GitLab 18.8+) lists the entries of the archive's metadata under ``path``, paged.
  ``recursive=true`` answers what GitLab's code answers, one level (``Metadata::Entry#children``),
  with ``settings(artifacts_tree_recursive="children")``; the default, ``all``, lists every entry
  below ``path``, as GitLab's documentation describes it. Switched off, its path reaches the
  single-file route and is a missing file named ``tree`` (404), as on an older GitLab.
"""

from __future__ import annotations

import io
import re
import zipfile
from functools import cache
from typing import Any
from urllib.parse import quote

from tests.standin import job_logs
from tests.standin.rest_api import RestOutcome, RestRequest, _paginate, not_found, route

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


@cache
def archive() -> bytes:
    """The zip of :data:`job_logs.ARTIFACT_FILES`, with an entry for every folder (as the runner
    writes it); text deflated, binaries stored."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in entries():
            if path.endswith("/"):
                zf.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 15, 9, 4, 0)), b"")
                continue
            data = job_logs.ARTIFACT_FILES[path]
            info = zipfile.ZipInfo(path, date_time=(2026, 1, 15, 9, 4, 0))
            binary = path.endswith((".png", ".bin"))
            info.compress_type = zipfile.ZIP_STORED if binary else zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return buf.getvalue()


@cache
def entries() -> tuple[str, ...]:
    """Every path of the archive, folders (ending in ``/``) included, sorted."""
    paths = set(job_logs.ARTIFACT_FILES)
    for path in job_logs.ARTIFACT_FILES:
        parts = path.split("/")[:-1]
        paths.update("/".join(parts[: i + 1]) + "/" for i in range(len(parts)))
    return tuple(sorted(paths))


def _tree_entry(path: str) -> dict[str, Any]:
    folder = path.endswith("/")
    out: dict[str, Any] = {
        "name": path.rstrip("/").rsplit("/", 1)[-1],
        "path": path,
        "type": "directory" if folder else "file",
        "mode": "040755" if folder else "100644",
    }
    if not folder:
        out["size"] = len(job_logs.ARTIFACT_FILES[path])
    return out


@route("GET", "/projects/:id/jobs/:job_id/artifacts/tree")
def _tree(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    if not req.world.settings.artifacts_tree:  # an older GitLab: the single-file route
        return job_logs._get_artifact_file(req, {**params, "artifact_path": "tree"})
    error, _pl, job = job_logs._job(req, params)
    if error or job is None:
        return error or not_found()
    if job.id != job_logs.ARTIFACTS_JOB_ID:
        return not_found("Artifacts Not Found")
    directory = req.query.get("path", "").strip("/")
    prefix = f"{directory}/" if directory else ""
    if prefix and prefix not in entries():
        return not_found("Path Not Found")
    below = [p for p in entries() if p.startswith(prefix) and p != prefix]
    recursive = req.query.get("recursive") == "true"
    if not recursive or req.world.settings.artifacts_tree_recursive == "children":
        # GitLab answers `entry.children` for recursive=true (lib/api/ci/job_artifacts.rb), and
        # Metadata::Entry#children matches one level (`[^/]+/?$`): only the documented "all
        # entries recursively" ("all") lists deeper ones. Without recursive: folders, then files.
        below = [p for p in below if "/" not in p[len(prefix) :].rstrip("/")]
        if not recursive:
            below = [p for p in below if p.endswith("/")] + [p for p in below if not p.endswith("/")]
    path = f"/projects/{quote(params['id'], safe='')}/jobs/{params['job_id']}/artifacts/tree"
    chunk, headers = _paginate(req, [_tree_entry(p) for p in below], path)
    return RestOutcome(200, chunk, headers=headers)


@route("GET", "/projects/:id/jobs/:job_id/artifacts")
def _download(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    error, _pl, job = job_logs._job(req, params)
    if error or job is None:
        return error or not_found()
    if job.id != job_logs.ARTIFACTS_JOB_ID:
        return not_found()
    mode = req.world.settings.artifacts_download
    if mode == "redirect":
        location = f"https://storage.standin.invalid/artifacts/{job.id}/artifacts.zip?X-Amz-Signature=standin"
        return RestOutcome(302, raw=b"", content_type="text/html", headers={"Location": location})
    data = archive()
    zip_type = "application/zip"
    disposition = {"Content-Disposition": 'attachment; filename="artifacts.zip"'}
    spec = req.headers.get("Range")
    match = _RANGE.fullmatch(spec.strip()) if spec and mode == "range" else None
    if match is None or match[0] == "bytes=-":
        return RestOutcome(200, raw=data, content_type=zip_type, headers=disposition)
    size = len(data)
    if match[1] == "":
        start, end = max(0, size - int(match[2])), size - 1
    else:
        start = int(match[1])
        end = min(size - 1, int(match[2])) if match[2] else size - 1
    if start >= size or start > end:
        return RestOutcome(416, raw=b"", content_type=zip_type, headers={"Content-Range": f"bytes */{size}"})
    return RestOutcome(
        206,
        raw=data[start : end + 1],
        content_type=zip_type,
        headers={**disposition, "Content-Range": f"bytes {start}-{end}/{size}"},
    )
