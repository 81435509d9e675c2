"""An in-memory GitLab for ``get_repository_file`` unit tests (respx side effects).

GraphQL documents are parsed, validated against GitLab's complete schema and executed with
graphql-core over a small repository model, so a field that does not exist or a wrong variable
fails the test instead of being answered. REST serves ``GET /projects/:id/repository/tags``
(``search=^prefix``, ``page``/``per_page``). Every request is recorded, so tests can count what
GitLab received.

Data set: project ``grp/sub/proj`` (id 42), default branch ``main``; branches ``main``,
``feature``, ``feature/with-slash``, ``my-topic/with-slash``; tag ``v1.0.0`` and
``release/2026/q1``. Files are set per test with :meth:`FakeRepoGitLab.add`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx
import respx
from graphql import execute_sync, parse, validate

from tests.unit.gitlab.fake_gitlab import gitlab_schema

GITLAB = "https://gitlab.example.com"
GRAPHQL_URL = f"{GITLAB}/api/graphql"
API = f"{GITLAB}/api/v4"
PROJECT = "grp/sub/proj"
PROJECT_ID = 42


def sha_of(name: str) -> str:
    """A deterministic 40-hex commit SHA for a test commit name."""
    return hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()


MAIN_SHA = sha_of("main")
FEATURE_SHA = sha_of("feature")
SLASH_SHA = sha_of("feature/with-slash")
TOPIC_SHA = sha_of("my-topic/with-slash")
TAG_SHA = sha_of("v1.0.0")
RELEASE_SHA = sha_of("release/2026/q1")


@dataclass
class FakeBlob:
    """One file: ``data`` as stored (bytes); ``raw_size`` overrides for LFS or truncated files."""

    data: bytes
    lfs_size: int | None = None
    full_size: int | None = None

    def node(self, path: str) -> dict[str, Any]:
        binary = b"\0" in self.data[:8000]
        text: str | None = None
        if not binary:
            try:
                text = self.data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        raw_size = self.lfs_size or self.full_size or len(self.data)
        return {
            "path": path,
            "rawSize": str(raw_size),  # GitLab's BigInt scalar is a JSON string
            "rawTextBlob": text,
            "storedExternally": self.lfs_size is not None,
            "externalStorage": "lfs" if self.lfs_size is not None else None,
        }


@dataclass
class FakeRepoGitLab:
    """The repository model, the GraphQL/REST handlers and the log of requests."""

    exclusion_rules: list[str] | None = None
    ce: bool = False  # GitLab CE: refuses documents that name EE fields, and says so in metadata
    version: str = "19.4.0"
    empty: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    trees: dict[str, dict[str, FakeBlob]] = field(default_factory=dict)
    graphql_errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.branches = {
            "main": MAIN_SHA,
            "feature": FEATURE_SHA,
            "feature/with-slash": SLASH_SHA,
            "my-topic/with-slash": TOPIC_SHA,
        }
        self.tags = {"v1.0.0": TAG_SHA, "release/2026/q1": RELEASE_SHA}
        self.trees = {sha: {} for sha in {*self.branches.values(), *self.tags.values()}}

    # -- data ------------------------------------------------------------------------------

    def add(self, path: str, data: bytes | str, *, at: str | None = None, **kw: Any) -> FakeBlob:
        """Put a file at ``path`` in the tree of commit ``at`` (default: every commit)."""
        blob = FakeBlob(data.encode("utf-8") if isinstance(data, str) else data, **kw)
        for sha in [at] if at else list(self.trees):
            self.trees[sha][path] = blob
        return blob

    def resolve(self, ref: str | None, ref_type: str | None = None) -> str | None:
        """The commit SHA ``ref`` names, as Gitaly resolves it (see ``tests/standin/models.py``)."""
        if self.empty:
            return None
        ref = ref or "main"
        if ref_type == "HEADS" or ref.startswith("refs/heads/"):
            return self.branches.get(ref.removeprefix("refs/heads/"))
        if ref_type == "TAGS" or ref.startswith("refs/tags/"):
            return self.tags.get(ref.removeprefix("refs/tags/"))
        if ref == "HEAD":
            return self.branches["main"]
        if ref in self.tags:
            return self.tags[ref]
        if ref in self.branches:
            return self.branches[ref]
        if ref.lower() in self.trees:
            return ref.lower()
        return None

    # -- GraphQL ---------------------------------------------------------------------------

    def _project(self) -> dict[str, Any]:
        def commit(_info: Any, ref: str) -> dict[str, Any] | None:
            sha = self.resolve(ref)
            return {"sha": sha} if sha else None

        def blobs(
            _info: Any, paths: list[str], ref: str | None = None, refType: str | None = None, **_: Any
        ) -> dict[str, Any]:
            sha = self.resolve(ref, refType)
            tree = self.trees.get(sha, {}) if sha else {}
            return {"nodes": [tree[p].node(p) for p in paths if p in tree]}

        def branch_names(_info: Any, searchPattern: str, offset: int, limit: int) -> list[str]:
            names = sorted(n for n in self.branches if fnmatch.fnmatchcase(n, searchPattern))
            return names[offset : offset + limit]

        settings = None if self.exclusion_rules is None else {"exclusionRules": self.exclusion_rules}
        return {
            "id": f"gid://gitlab/Project/{PROJECT_ID}",
            "fullPath": PROJECT,
            "duoContextExclusionSettings": settings,
            "repository": {
                "empty": self.empty,
                "commit": commit,
                "blobs": blobs,
                "branchNames": branch_names,
            },
        }

    def _root(self) -> dict[str, Any]:
        def project(_info: Any, fullPath: str) -> dict[str, Any] | None:
            return self._project() if fullPath == PROJECT else None

        def projects(_info: Any, ids: list[str] | None = None, **_: Any) -> dict[str, Any]:
            nodes = [self._project()] if ids and f"gid://gitlab/Project/{PROJECT_ID}" in ids else []
            return {"nodes": nodes}

        metadata = {"version": self.version, "enterprise": not self.ce}
        return {"project": project, "projects": projects, "metadata": metadata}

    def graphql(self, request: httpx.Request) -> httpx.Response:
        """respx side effect for ``POST /api/graphql``."""
        body = json.loads(request.content)
        self.requests.append({"kind": "graphql", **body})
        selections = "\n".join(line.split("#", 1)[0] for line in body["query"].splitlines())
        if self.ce and "duoContextExclusionSettings" in selections:
            # What GitLab CE answers: the field is EE-only, so the whole document is invalid.
            message = "Field 'duoContextExclusionSettings' doesn't exist on type 'Project'"
            return httpx.Response(200, json={"errors": [{"message": message}]})
        if self.graphql_errors:
            return httpx.Response(
                200, json={"data": None, "errors": [{"message": self.graphql_errors.pop(0)}]}
            )
        document = parse(body["query"])
        errors = validate(gitlab_schema(), document)
        assert not errors, f"invalid GraphQL document: {[e.message for e in errors]}"
        result = execute_sync(
            gitlab_schema(),
            document,
            root_value=self._root(),
            variable_values=body.get("variables"),
            operation_name=body.get("operationName"),
        )
        assert not result.errors, f"GraphQL execution failed: {[e.message for e in result.errors]}"
        return httpx.Response(200, json={"data": result.data})

    # -- REST ------------------------------------------------------------------------------

    def tags_route(self, request: httpx.Request) -> httpx.Response:
        """respx side effect for ``GET /projects/:id/repository/tags``."""
        path = request.url.raw_path.decode().split("?", 1)[0]
        self.requests.append({"kind": "rest", "path": path, "params": dict(request.url.params)})
        project = unquote(path.split("/projects/")[1].split("/repository")[0])
        if project not in (PROJECT, str(PROJECT_ID)):
            return httpx.Response(404, json={"message": "404 Project Not Found"})
        search = request.url.params.get("search", "")
        names = sorted(self.tags)
        if search.startswith("^"):
            names = [n for n in names if n.startswith(search[1:])]
        elif search:
            names = [n for n in names if search in n]
        per_page = int(request.url.params.get("per_page", 20))
        page = int(request.url.params.get("page", 1))
        chosen = names[(page - 1) * per_page : page * per_page]
        return httpx.Response(200, json=[{"name": n, "commit": {"id": self.tags[n]}} for n in chosen])

    def mount(self, router: respx.MockRouter) -> None:
        """Route GitLab's GraphQL endpoint and the tags API to this fake."""
        router.post(GRAPHQL_URL).mock(side_effect=self.graphql)
        router.get(url__regex=rf"^{API}/projects/[^/]+/repository/tags(\?.*)?$").mock(
            side_effect=self.tags_route
        )

    # -- assertions ------------------------------------------------------------------------

    @property
    def operations(self) -> list[str]:
        """What GitLab received, in order: GraphQL operation names and ``REST tags``."""
        return [
            r.get("operationName") or "?" if r["kind"] == "graphql" else "REST tags" for r in self.requests
        ]

    def variables(self, index: int = -1) -> dict[str, Any]:
        """Variables of the ``index``-th GraphQL request."""
        graphql = [r for r in self.requests if r["kind"] == "graphql"]
        variables: dict[str, Any] = graphql[index]["variables"]
        return variables
