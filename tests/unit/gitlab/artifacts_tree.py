"""GitLab's artifacts tree (``GET /projects/:id/jobs/:job_id/artifacts/tree``) for respx, answering
``recursive=true`` as GitLab's code does: the children of ``path``, one level
(``Gitlab::Ci::Build::Artifacts::Metadata::Entry#children``), or, with ``deep=True``, every entry
below it as https://docs.gitlab.com/api/job_artifacts/#list-all-files-in-the-artifacts-archive
describes. Sorted by path as the archive's metadata is, paged by ``per_page``/``page``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx


def tree_entry(path: str, size: int | None) -> dict[str, Any]:
    """One entry as GitLab's tree answers it (a folder's path ends in ``/`` and has no size)."""
    is_dir = path.endswith("/")
    out: dict[str, Any] = {
        "name": path.rstrip("/").rsplit("/", 1)[-1],
        "path": path,
        "type": "directory" if is_dir else "file",
        "mode": "040755" if is_dir else "100644",
    }
    if not is_dir:
        out["size"] = size
    return out


def gitlab_tree(
    files: Mapping[str, int | bytes], *, deep: bool = False
) -> Callable[[httpx.Request], httpx.Response]:
    """A respx side effect serving the tree of an archive of ``files`` (path: size or content),
    with an entry for every folder, as the metadata GitLab writes has."""
    sizes = {path: data if isinstance(data, int) else len(data) for path, data in files.items()}
    paths = set(sizes)
    for path in sizes:
        parts = path.split("/")[:-1]
        paths.update("/".join(parts[: n + 1]) + "/" for n in range(len(parts)))
    ordered = sorted(paths)

    def answer(request: httpx.Request) -> httpx.Response:
        q = request.url.params
        assert q.get("recursive") == "true"
        directory = q.get("path", "").strip("/")
        prefix = f"{directory}/" if directory else ""
        if prefix and prefix not in paths:
            return httpx.Response(404, json={"message": "404 Path Not Found"})
        below = [p for p in ordered if p.startswith(prefix) and p != prefix]
        if not deep:
            below = [p for p in below if "/" not in p[len(prefix) :].removesuffix("/")]
        per_page, page = int(q.get("per_page", "20")), int(q.get("page", "1"))
        chunk = below[(page - 1) * per_page : page * per_page]
        return httpx.Response(200, json=[tree_entry(p, sizes.get(p)) for p in chunk])

    return answer
