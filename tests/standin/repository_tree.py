"""A repository's tree in the stand-in: ``GET /projects/:id/repository/tree``
(https://docs.gitlab.com/api/repositories/#list-repository-tree).

As GitLab answers it: ``ref`` defaults to the default branch, and a ref that names no commit is
``404 Tree Not Found``; ``path`` lists that folder (a path that is no folder lists nothing: ``[]``);
``recursive=true`` lists every entry below it; folders (``tree``) come before files (``blob``),
each sorted by path; offset pages (``page``, ``per_page``) with GitLab's paging headers.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import quote

from tests.standin.rest_api import RestOutcome, RestRequest, _paginate, _project, not_found, route


def _entry(path: str, kind: str, mode: str) -> dict[str, Any]:
    return {
        "id": hashlib.sha1(f"{kind}:{path}".encode()).hexdigest(),
        "name": path.rsplit("/", 1)[-1],
        "type": kind,
        "path": path,
        "mode": mode,
    }


@route("GET", "/projects/:id/repository/tree")
def _tree(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found")
    commit = p.repository.resolve(req.query.get("ref") or None)
    if commit is None:
        return not_found("Tree Not Found")
    folder = req.query.get("path", "").strip("/")
    prefix = f"{folder}/" if folder else ""
    recursive = req.query.get("recursive") == "true"
    folders: set[str] = set()
    files: dict[str, str] = {}
    for path, blob in commit.tree.items():
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix) :].split("/")
        for depth in range(1, len(rest)):
            if recursive or depth == 1:
                folders.add(prefix + "/".join(rest[:depth]))
        if recursive or len(rest) == 1:
            files[path] = blob.mode
    items = [_entry(f, "tree", "040000") for f in sorted(folders)]
    items += [_entry(f, "blob", files[f]) for f in sorted(files)]
    route_path = f"/projects/{quote(params['id'], safe='')}/repository/tree"
    chunk, headers = _paginate(req, items, route_path)
    return RestOutcome(200, chunk, headers=headers)
