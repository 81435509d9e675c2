"""GitLab's REST API (``/api/v4``) over the stand-in's data: the routes the gateway's tools use.

Routes are matched on the *raw* request path, split on ``/`` and decoded exactly once per
segment, as GitLab (Grape) does: a project is its numeric id or its URL-encoded full path in one
segment (``grp%2Fsub%2Fproj``); a branch, tag or file path is one encoded segment too. A segment
that still holds a percent escape after that one decoding (``grp%252Fsub``) was encoded twice:
GitLab would answer 404 for a project literally named ``grp%2Fsub``, and so does the stand-in,
but it also reports the segment so the test fails (see :class:`RestOutcome.invalid`).

Shapes follow GitLab's REST entities (``lib/api/entities``; ``doc/api/branches.md``,
``tags.md``, ``repository_files.md``, ``pipelines.md``, ``jobs.md``, ``version.md``), with the
fields tools read; pagination uses ``page``/``per_page`` (default 20, max 100) and the ``x-*`` and
``Link`` headers.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlencode

from tests.standin.graphql_api import detailed_status
from tests.standin.models import Commit, Job, Pipeline, Project, Tag, User, World

_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


@dataclass
class RestOutcome:
    """One REST answer: status, JSON (or raw bytes), headers, the route template, and problems."""

    status: int
    body: Any = None
    raw: bytes | None = None
    stream: Iterable[bytes] | None = None
    """A body sent as it is made (a large job log), instead of ``raw``."""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    route: str | None = None
    invalid: list[str] = field(default_factory=list)
    """Why the request itself was wrong (a doubly-encoded segment); the fixture fails the test."""


@dataclass
class RestRequest:
    """What a route handler needs: caller, query, URLs (``web_root`` includes any sub-path)."""

    world: World
    user: User | None
    authenticated: bool
    method: str
    segments: list[str]
    query: Mapping[str, str]
    query_lists: Mapping[str, list[str]]
    web_root: str
    api_root: str
    headers: Mapping[str, str] = field(default_factory=dict)
    """The request's headers (``Range``)."""
    body: bytes = b""
    """The request's body (a POST's parameters, JSON or a form)."""


def split_raw_path(raw_path: str) -> tuple[list[str], list[str]]:
    """Split a raw path (no query) into segments decoded exactly once; also report segments that
    still hold a percent escape after decoding (sent encoded twice)."""
    segments = [unquote(s) for s in raw_path.split("/") if s != ""]
    doubled = [s for s in segments if _ESCAPE.search(s)]
    return segments, doubled


def not_found(what: str = "Not Found") -> RestOutcome:
    """GitLab's 404 body, ``{"message": "404 <what>"}``."""
    return RestOutcome(404, {"message": f"404 {what}"})


def unauthorized() -> RestOutcome:
    """GitLab's 401 body."""
    return RestOutcome(401, {"message": "401 Unauthorized"})


# -- entities -------------------------------------------------------------------------------------


def _hostname(url: str) -> str:
    return url.split("://", 1)[-1].split("/")[0].split(":")[0]


def project_entity(req: RestRequest, p: Project) -> dict[str, Any]:
    ns_path = p.namespace_path
    group = req.world.group_by_path(ns_path)
    web = f"{req.web_root}/{p.full_path}"
    return {
        "id": p.id,
        "description": p.description,
        "name": p.name,
        "name_with_namespace": " / ".join([*p.full_path.split("/")[:-1], p.name]),
        "path": p.path,
        "path_with_namespace": p.full_path,
        "created_at": p.created_at,
        "default_branch": p.repository.default_branch,
        "tag_list": [],
        "topics": [],
        "ssh_url_to_repo": f"git@{_hostname(req.web_root)}:{p.full_path}.git",
        "http_url_to_repo": f"{web}.git",
        "web_url": web,
        "readme_url": f"{web}/-/blob/main/README.md",
        "avatar_url": None,
        "forks_count": 0,
        "star_count": 0,
        "last_activity_at": "2026-01-15T10:05:00.000Z",
        "namespace": {
            "id": group.id if group else 0,
            "name": ns_path.rsplit("/", 1)[-1],
            "path": ns_path.rsplit("/", 1)[-1],
            "kind": "group",
            "full_path": ns_path,
            "parent_id": None,
            "avatar_url": None,
            "web_url": f"{req.web_root}/groups/{ns_path}",
        },
        "visibility": p.visibility,
        "empty_repo": not p.repository.commits,
        "archived": False,
        "_links": {"self": f"{req.api_root}/projects/{p.id}"},
    }


def commit_entity(req: RestRequest, p: Project, c: Commit) -> dict[str, Any]:
    return {
        "id": c.sha,
        "short_id": c.sha[:8],
        "created_at": c.authored_at,
        "parent_ids": [c.parent_sha] if c.parent_sha else [],
        "title": c.title,
        "message": c.message,
        "author_name": c.author_name,
        "author_email": c.author_email,
        "authored_date": c.authored_at,
        "committer_name": c.author_name,
        "committer_email": c.author_email,
        "committed_date": c.authored_at,
        "trailers": {},
        "extended_trailers": {},
        "web_url": f"{req.web_root}/{p.full_path}/-/commit/{c.sha}",
    }


def branch_entity(req: RestRequest, p: Project, name: str) -> dict[str, Any]:
    repo = p.repository
    can_push = p.can_update_pipeline(req.user)
    return {
        "name": name,
        "commit": commit_entity(req, p, repo.commits[repo.branches[name]]),
        "merged": False,
        "protected": name in repo.protected_branches,
        "developers_can_push": False,
        "developers_can_merge": False,
        "can_push": can_push,
        "default": name == repo.default_branch,
        "web_url": f"{req.web_root}/{p.full_path}/-/tree/{name}",
    }


def tag_entity(req: RestRequest, p: Project, tag: Tag) -> dict[str, Any]:
    return {
        "name": tag.name,
        "message": tag.message,
        "target": tag.sha,
        "commit": commit_entity(req, p, p.repository.commits[tag.sha]),
        "release": None,
        "protected": False,
        "created_at": tag.created_at,
    }


def pipeline_entity(req: RestRequest, pl: Pipeline, *, basic: bool = False) -> dict[str, Any]:
    p = req.world.projects[pl.project_id]
    web = f"{req.web_root}/{p.full_path}/-/pipelines/{pl.id}"
    out: dict[str, Any] = {
        "id": pl.id,
        "iid": pl.iid,
        "project_id": pl.project_id,
        "sha": pl.sha,
        "ref": pl.ref,
        "status": pl.status.lower(),
        "source": pl.source,
        "created_at": pl.created_at,
        "updated_at": pl.finished_at or pl.created_at,
        "web_url": web,
        "name": pl.name,
    }
    if basic:
        return out
    user = req.world.user_named(pl.user)
    return {
        **out,
        "before_sha": "0" * 40,
        "tag": pl.tag,
        "yaml_errors": None,
        "user": user_entity(req, user) if user else None,
        "started_at": pl.started_at,
        "finished_at": pl.finished_at,
        "committed_at": pl.created_at,
        "duration": pl.duration,
        "queued_duration": 30.0 if pl.started_at else None,
        "coverage": None,
        "detailed_status": _rest_status(pl.status, str(pl.id), web),
    }


def _rest_status(status: str, ident: str, web: str) -> dict[str, Any]:
    d = detailed_status(status, ident, web)
    return {
        "icon": d["icon"],
        "text": d["text"].lower(),
        "label": d["label"],
        "group": d["group"],
        "tooltip": d["tooltip"],
        "has_details": d["hasDetails"],
        "details_path": d["detailsPath"],
        "illustration": None,
        "favicon": d["favicon"],
    }


def user_entity(req: RestRequest, u: User) -> dict[str, Any]:
    return {
        "id": u.id,
        "username": u.username,
        "name": u.name,
        "state": "active",
        "locked": False,
        "avatar_url": None,
        "web_url": f"{req.web_root}/{u.username}",
    }


def job_entity(req: RestRequest, pl: Pipeline, j: Job) -> dict[str, Any]:
    p = req.world.projects[pl.project_id]
    user = req.world.user_named(pl.user)
    out: dict[str, Any] = {
        "id": j.id,
        "status": j.status.lower(),
        "stage": j.stage,
        "name": j.name,
        "ref": pl.ref,
        "tag": pl.tag,
        "coverage": None,
        "allow_failure": j.allow_failure,
        "created_at": j.created_at,
        "started_at": j.started_at,
        "finished_at": j.finished_at,
        "erased_at": None,
        "duration": j.duration,
        "queued_duration": 5.0 if j.started_at else None,
        "user": user_entity(req, user) if user else None,
        "commit": commit_entity(req, p, p.repository.commits[pl.sha])
        if pl.sha in p.repository.commits
        else None,
        "pipeline": pipeline_entity(req, pl, basic=True),
        "web_url": f"{req.web_root}/{p.full_path}/-/jobs/{j.id}",
        "project": {"ci_job_token_scope_enabled": False},
    }
    if j.status == "FAILED":
        out["failure_reason"] = j.failure_reason or "script_failure"
    if j.kind == "BRIDGE":
        target = req.world.pipelines.get(j.downstream_pipeline_id) if j.downstream_pipeline_id else None
        tp = req.world.projects.get(target.project_id) if target else None
        out["downstream_pipeline"] = (
            pipeline_entity(req, target, basic=True) if target and tp and tp.can_read(req.user) else None
        )
    else:
        out["tag_list"] = list(j.tags)
        out["artifacts"] = []
        out["runner"] = None
        out["artifacts_expire_at"] = None
        out["archived"] = False
    return out


# -- routing --------------------------------------------------------------------------------------

Handler = Callable[[RestRequest, dict[str, str]], RestOutcome]
_ROUTES: list[tuple[str, tuple[str, ...], Handler]] = []


def route(method: str, template: str) -> Callable[[Handler], Handler]:
    """Register a handler for ``METHOD /a/:b/c`` (``:name`` matches one decoded segment; a last
    ``*name`` matches the rest of the path, its segments decoded and joined with ``/``)."""

    def deco(fn: Handler) -> Handler:
        _ROUTES.append((method, tuple(s for s in template.split("/") if s), fn))
        return fn

    return deco


def dispatch(req: RestRequest) -> RestOutcome:
    """Find the route for ``req`` and run it; 404 ``{"error": "404 Not Found"}`` when none matches.
    A route without a ``*name`` part is tried before those with one, as GitLab defines
    ``.../artifacts/tree`` before ``.../artifacts/*artifact_path``."""
    for method, parts, fn in sorted(_ROUTES, key=lambda r: bool(r[1]) and r[1][-1].startswith("*")):
        if method != req.method and not (method == "GET" and req.method == "HEAD"):
            continue
        segments = req.segments
        if parts and parts[-1].startswith("*"):
            if len(segments) < len(parts):
                continue
            segments = [*segments[: len(parts) - 1], "/".join(segments[len(parts) - 1 :])]
        if len(parts) != len(segments):
            continue
        params: dict[str, str] = {}
        for want, got in zip(parts, segments, strict=True):
            if want.startswith((":", "*")):
                params[want[1:]] = got
            elif want != got:
                break
        else:
            outcome = fn(req, params)
            outcome.route = f"{method} /{'/'.join(parts)}"
            return outcome
    return RestOutcome(404, {"error": "404 Not Found"})


def _paginate(req: RestRequest, items: Sequence[Any], path: str) -> tuple[list[Any], dict[str, str]]:
    try:
        page = max(1, int(req.query.get("page", "1")))
        per_page = min(100, max(1, int(req.query.get("per_page", "20"))))
    except ValueError:
        page, per_page = 1, 20
    total = len(items)
    pages = max(1, math.ceil(total / per_page))
    chunk = list(items[(page - 1) * per_page : page * per_page])
    headers = {
        "X-Page": str(page),
        "X-Per-Page": str(per_page),
        "X-Total": str(total),
        "X-Total-Pages": str(pages),
        "X-Next-Page": str(page + 1) if page < pages else "",
        "X-Prev-Page": str(page - 1) if page > 1 else "",
    }
    base = {k: v for k, v in req.query.items() if k not in ("page", "per_page")}

    def link(p: int, rel: str) -> str:
        return f'<{req.api_root}{path}?{urlencode({**base, "page": p, "per_page": per_page})}>; rel="{rel}"'

    links = ([link(page + 1, "next")] if page < pages else []) + (
        [link(page - 1, "prev")] if page > 1 else []
    )
    headers["Link"] = ", ".join([*links, link(1, "first"), link(pages, "last")])
    return chunk, headers


def _project(req: RestRequest, ident: str) -> Project | None:
    p = req.world.project_by_ref(ident)
    return p if p is not None and p.can_read(req.user) else None


def _search(names: list[str], search: str | None) -> list[str]:
    """GitLab's branch/tag ``search``: ``^x`` starts with, ``x$`` ends with, else contains (any case)."""
    if not search:
        return names
    term = search.lower()
    if term.startswith("^") and term.endswith("$"):
        return [n for n in names if n.lower() == term[1:-1]]
    if term.startswith("^"):
        return [n for n in names if n.lower().startswith(term[1:])]
    if term.endswith("$"):
        return [n for n in names if n.lower().endswith(term[:-1])]
    return [n for n in names if term in n.lower()]


@route("GET", "/version")
def _version(req: RestRequest, _: dict[str, str]) -> RestOutcome:
    if req.user is None:
        return unauthorized()
    s = req.world.settings
    return RestOutcome(
        200,
        {
            "version": s.version,
            "revision": s.revision,
            "kas": {"enabled": False, "externalUrl": None, "externalK8sProxyUrl": None, "version": None},
            "enterprise": s.edition == "ee",
        },
    )


@route("GET", "/metadata")
def _metadata(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    return _version(req, params)


@route("GET", "/user")
def _current_user(req: RestRequest, _: dict[str, str]) -> RestOutcome:
    if req.user is None:
        return unauthorized()
    return RestOutcome(200, {**user_entity(req, req.user), "is_admin": req.user.admin, "bot": req.user.bot})


@route("GET", "/projects/:id")
def _get_project(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    p = _project(req, params["id"])
    return RestOutcome(200, project_entity(req, p)) if p else not_found("Project Not Found")


@route("GET", "/projects/:id/repository/branches")
def _list_branches(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found")
    names = _search(sorted(p.repository.branches), req.query.get("search"))
    chunk, headers = _paginate(req, names, f"/projects/{p.id}/repository/branches")
    return RestOutcome(200, [branch_entity(req, p, n) for n in chunk], headers=headers)


@route("GET", "/projects/:id/repository/branches/:branch")
def _get_branch(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found")
    if params["branch"] not in p.repository.branches:
        return not_found("Branch Not Found")
    return RestOutcome(200, branch_entity(req, p, params["branch"]))


@route("GET", "/projects/:id/repository/tags")
def _list_tags(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found")
    tags = p.repository.tags
    order_by = req.query.get("order_by", "updated")
    ordered = sorted(tags, key=lambda n: tags[n].name if order_by == "name" else tags[n].created_at)
    if req.query.get("sort", "desc") == "desc":
        ordered.reverse()
    names = _search(ordered, req.query.get("search"))
    chunk, headers = _paginate(req, names, f"/projects/{p.id}/repository/tags")
    return RestOutcome(200, [tag_entity(req, p, tags[n]) for n in chunk], headers=headers)


@route("GET", "/projects/:id/repository/tags/:tag")
def _get_tag(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found")
    tag = p.repository.tags.get(params["tag"])
    return RestOutcome(200, tag_entity(req, p, tag)) if tag else not_found("Tag Not Found")


@route("GET", "/projects/:id/repository/commits/:sha")
def _get_commit(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found")
    c = p.repository.resolve(params["sha"])
    if c is None:
        return not_found("Commit Not Found")
    # GitLab's CommitDetail adds the diff's line counts (``stats``, asked by default), the last
    # pipeline's status and the project (https://docs.gitlab.com/api/commits/#get-a-single-commit).
    parent = p.repository.commits.get(c.parent_sha) if c.parent_sha else None
    additions, deletions = _line_changes(parent.tree if parent else {}, c.tree)
    detail = {
        "stats": {"additions": additions, "deletions": deletions, "total": additions + deletions},
        "status": None,
        "project_id": p.id,
        "last_pipeline": None,
    }
    return RestOutcome(200, {**commit_entity(req, p, c), **detail})


def _line_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[int, int]:
    """Lines added and removed between two trees, counted per changed file as whole files."""
    added = removed = 0
    for path in set(before) | set(after):
        old, new = before.get(path), after.get(path)
        if old is new:
            continue
        added += new.data.count(b"\n") if new is not None else 0
        removed += old.data.count(b"\n") if old is not None else 0
    return added, removed


def _file(req: RestRequest, params: dict[str, str]) -> tuple[RestOutcome | None, Any]:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found"), None
    ref = req.query.get("ref")
    if not ref:
        return RestOutcome(400, {"error": "ref is missing"}), None
    commit = p.repository.resolve(ref)
    if commit is None:
        return not_found("Commit Not Found"), None
    blob = commit.tree.get(params["file_path"])
    if blob is None:
        return not_found("File Not Found"), None
    return None, (p, commit, ref, params["file_path"], blob)


@route("GET", "/projects/:id/repository/files/:file_path")
def _get_file(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    error, found = _file(req, params)
    if error:
        return error
    _p, commit, ref, path, blob = found
    data = blob.data
    body = {
        "file_name": path.rsplit("/", 1)[-1],
        "file_path": path,
        "size": len(data),
        "encoding": "base64",
        "content_sha256": hashlib.sha256(data).hexdigest(),
        "ref": ref,
        "blob_id": blob.oid,
        "commit_id": commit.sha,
        "last_commit_id": commit.sha,
        "execute_filemode": blob.mode == "100755",
        "content": base64.b64encode(data).decode(),
    }
    headers = {
        "X-Gitlab-File-Name": body["file_name"],
        "X-Gitlab-File-Path": path,
        "X-Gitlab-Size": str(len(data)),
        "X-Gitlab-Encoding": "base64",
        "X-Gitlab-Ref": ref,
        "X-Gitlab-Blob-Id": blob.oid,
        "X-Gitlab-Commit-Id": commit.sha,
        "X-Gitlab-Last-Commit-Id": commit.sha,
        "X-Gitlab-Content-Sha256": body["content_sha256"],
    }
    if req.method == "HEAD":
        return RestOutcome(200, None, raw=b"", headers=headers)
    return RestOutcome(200, body, headers=headers)


@route("GET", "/projects/:id/repository/files/:file_path/raw")
def _get_raw_file(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    error, found = _file(req, params)
    if error:
        return error
    _p, commit, _ref, _path, blob = found
    content_type = "application/octet-stream" if blob.is_binary else "text/plain; charset=utf-8"
    return RestOutcome(
        200,
        raw=blob.data,
        content_type=content_type,
        headers={"X-Gitlab-Blob-Id": blob.oid, "X-Gitlab-Commit-Id": commit.sha},
    )


def _pipeline(req: RestRequest, params: dict[str, str]) -> tuple[RestOutcome | None, Pipeline | None]:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found"), None
    pid = params["pipeline_id"]
    pl = req.world.pipelines.get(int(pid)) if pid.isdigit() else None
    if pl is None or pl.project_id != p.id:
        return not_found("Not found"), None
    return None, pl


@route("GET", "/projects/:id/pipelines/:pipeline_id")
def _get_pipeline(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    error, pl = _pipeline(req, params)
    return error or RestOutcome(200, pipeline_entity(req, pl))  # type: ignore[arg-type]


def _jobs(req: RestRequest, params: dict[str, str], kind: str, path: str) -> RestOutcome:
    error, pl = _pipeline(req, params)
    if error or pl is None:
        return error or not_found()
    scopes = {s.upper() for s in req.query_lists.get("scope[]", []) + req.query_lists.get("scope", [])}
    include_retried = req.query.get("include_retried", "false") == "true"
    jobs = [
        j
        for j in pl.jobs
        if j.kind == kind and (include_retried or not j.retried) and (not scopes or j.status in scopes)
    ]
    jobs.sort(key=lambda j: j.id, reverse=True)  # GitLab lists jobs newest first
    chunk, headers = _paginate(req, jobs, path.format(id=pl.project_id, pipeline_id=pl.id))
    return RestOutcome(200, [job_entity(req, pl, j) for j in chunk], headers=headers)


@route("GET", "/projects/:id/pipelines/:pipeline_id/jobs")
def _list_jobs(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    return _jobs(req, params, "BUILD", "/projects/{id}/pipelines/{pipeline_id}/jobs")


@route("GET", "/projects/:id/pipelines/:pipeline_id/bridges")
def _list_bridges(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    return _jobs(req, params, "BRIDGE", "/projects/{id}/pipelines/{pipeline_id}/bridges")


# Job routes (logs, artifacts, actions) live in their own module, registered on import.
from tests.standin import job_actions as _job_actions  # noqa: E402, F401
from tests.standin import job_artifacts as _job_artifacts  # noqa: E402, F401
from tests.standin import job_logs as _job_logs  # noqa: E402, F401
from tests.standin import repository_tree as _repository_tree  # noqa: E402, F401
from tests.standin import rest_pipelines as _rest_pipelines  # noqa: E402, F401
