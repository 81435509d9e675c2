"""GitLab's GraphQL API over the stand-in's data: validated and executed with graphql-core.

Every document is parsed and validated against GitLab's complete published schema
(``tests/gitlab/gitlab_schema.graphql``, built once per process by :func:`load_schema`), then
executed against that same schema. Resolvers are views over :mod:`tests.standin.models` whose
attribute names are the GraphQL field names, so graphql-core's own serialisation gives GitLab's
exact shapes: global IDs (``gid://gitlab/Ci::Pipeline/1001``), UPPERCASE enum values, BigInt as
strings, relay connections with ``pageInfo`` and opaque keyset cursors, ``first`` capped at 100.

GitLab behaviours copied (sources: gitlabhq ``app/graphql``, https://docs.gitlab.com/api/graphql/reference/):

- An object the caller may not read resolves to null (``project``, ``pipeline``,
  ``downstreamPipeline``, ``upstream``); connection nodes the caller may not read are dropped
  after paging (``Pipeline.downstream``), as GitLab's connection redaction does.
- Global ID arguments are checked like ``Types::GlobalIDType``: ``"1001" is not a valid Global ID``
  and ``... does not represent an instance of Ci::Pipeline``.
- ``Repository.blobs``: ``ref`` defaults to the root ref, is checked like
  ``Gitlab::GitRefValidator`` (``Ref is not valid``; ``HEAD`` allowed), qualified by ``refType``;
  missing paths are simply absent; several paths with data fields over 20 MiB are refused
  (``Max blobs size limit exceeded``). ``rawTextBlob`` is null for binary blobs; ``rawBlob`` on a
  binary blob is a UTF-8 conversion error, as in GitLab.
- Mutations and ``duoWorkflowWorkflows(workflowId:)`` answer "The resource that you are attempting
  to access does not exist or you don't have permission to perform this action" for what the
  caller cannot see or change.

Fields the stand-in does not implement resolve to null and are listed in the request log
(``unserved``), so a test sees at once when it asked for something the stand-in lacks.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias, TypeGuard

import yaml
from graphql import (
    DocumentNode,
    ExecutionResult,
    GraphQLError,
    GraphQLResolveInfo,
    GraphQLScalarType,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    execute,
    get_operation_ast,
    parse,
    validate,
    validate_schema,
    value_from_ast_untyped,
)
from graphql.language import FieldNode, FragmentDefinitionNode, FragmentSpreadNode, InlineFragmentNode

from tests.gitlab.band_schema import schema_for
from tests.gitlab.versions import NEWEST, Edition, parse_version
from tests.standin.models import (
    CANCELABLE_STATUSES,
    Blob,
    Commit,
    DuoMessage,
    DuoWorkflow,
    Group,
    Job,
    Pipeline,
    Project,
    TestCase,
    User,
    World,
)
from tests.standin.ruby_errors import ruby_errors
from tests.standin.schema_cache import build_gitlab_schema

log = logging.getLogger("standin.graphql")

Info: TypeAlias = "GraphQLResolveInfo[Any]"

RESOURCE_NOT_AVAILABLE = (
    "The resource that you are attempting to access does not exist or you don't have permission to "
    "perform this action"
)
#: ``GitlabSchema``'s query depth limits (``DEFAULT_MAX_DEPTH``, ``AUTHENTICATED_MAX_DEPTH``).
MAX_DEPTH_ANONYMOUS = 15
MAX_DEPTH_AUTHENTICATED = 20
#: graphql-ruby's ``max_page_size`` in GitLab (``GitlabSchema.default_max_page_size``).
MAX_PAGE_SIZE = 100
#: ``Resolvers::BlobsResolver::TOTAL_BLOB_DATA_SIZE_LIMIT``.
BLOBS_TOTAL_LIMIT = 20 * 1024 * 1024
_BLOB_DATA_FIELDS = frozenset({"rawBlob", "base64EncodedBlob", "rawTextBlob", "plainData"})

#: Global ID scalar → the model names GitLab accepts for it (``Types::GlobalIDType[Model]``).
_GID_MODELS: dict[str, tuple[str, ...]] = {
    "CiPipelineID": ("Ci::Pipeline",),
    "AiDuoWorkflowsWorkflowID": ("Ai::DuoWorkflows::Workflow",),
    "JobID": ("CommitStatus", "Ci::Build", "Ci::Bridge", "GenericCommitStatus"),
    "CiBuildID": ("Ci::Build",),
    "CiProcessableID": ("Ci::Processable", "Ci::Build", "Ci::Bridge"),
    "CiStageID": ("Ci::Stage",),
    "ProjectID": ("Project",),
    "UserID": ("User",),
    "GroupID": ("Group",),
    "NamespaceID": ("Namespace", "Group", "Namespaces::ProjectNamespace", "Namespaces::UserNamespace"),
}
_GID = re.compile(r"^gid://gitlab/(?P<model>[A-Za-z][A-Za-z0-9_:]*)/(?P<id>[^/?#\s]+)$")


# -- schema ---------------------------------------------------------------------------------------


def load_schema(path: Path) -> GraphQLSchema:
    """Build GitLab's schema from its SDL and wire the stand-in's scalar and type rules into it.

    Takes a second or two for the 1 MB SDL (less once :mod:`tests.standin.schema_cache` holds it),
    so call it once per process.

    Raises:
        GraphQLError: the SDL does not parse.
        TypeError: the schema is not valid.
    """
    return _wired(build_gitlab_schema(path), str(path))


def load_band_schema(version: str, edition: Edition, path: Path) -> GraphQLSchema:
    """The schema of GitLab ``version`` and ``edition`` (:func:`tests.gitlab.band_schema.schema_for`
    over the SDL at ``path``), wired as :func:`load_schema` wires it; the newest EE is the SDL itself."""
    if edition == "ee" and parse_version(version) == parse_version(NEWEST):
        return load_schema(path)
    return _wired(schema_for(version, edition, path), f"{path} as GitLab {version} {edition.upper()}")


def _wired(schema: GraphQLSchema, origin: str) -> GraphQLSchema:
    errors = validate_schema(schema)
    if errors:
        raise TypeError(f"GitLab schema {origin} is not valid: {errors[0].message}")
    for name, gql_type in schema.type_map.items():
        if isinstance(gql_type, GraphQLScalarType) and name.endswith("ID") and name != "ID":
            _make_gid_scalar(gql_type, _GID_MODELS.get(name))
    return schema


def _make_gid_scalar(scalar: GraphQLScalarType, models: tuple[str, ...] | None) -> None:
    def parse_value(value: Any) -> str:
        if not isinstance(value, str) or not (m := _GID.match(value)):
            raise GraphQLError(f"{json.dumps(value)} is not a valid Global ID")
        if models and m["model"] not in models:
            raise GraphQLError(f"{json.dumps(value)} does not represent an instance of {models[0]}")
        return value

    def parse_literal(node: Any, variables: Any = None) -> str:
        return parse_value(value_from_ast_untyped(node, variables))

    # graphql-core 3.3 coerces through coerce_input_*; 3.2 through parse_*.
    scalar.parse_value = parse_value  # type: ignore[method-assign]
    scalar.parse_literal = parse_literal  # type: ignore[method-assign]
    if hasattr(scalar, "coerce_input_value"):
        scalar.coerce_input_value = parse_value
        scalar.coerce_input_literal = parse_literal


def gid(model: str, ident: int | str) -> str:
    """A GitLab global ID, ``gid://gitlab/<model>/<id>``."""
    return f"gid://gitlab/{model}/{ident}"


def gid_id(value: str) -> int | None:
    """The integer tail of a global ID (None when it is not one)."""
    m = _GID.match(value)
    return int(m["id"]) if m and m["id"].isdigit() else None


# -- per-request context --------------------------------------------------------------------------


@dataclass
class Ctx:
    """What resolvers know about the request: data, caller, URLs, and what to record."""

    world: World
    user: User | None
    web_root: str
    """Absolute base of web URLs, ``http://127.0.0.1:N`` or ``http://127.0.0.1:N/gitlab``."""
    rel_root: str
    """GitLab's relative URL root: ``""`` or ``/gitlab`` (path fields start with it)."""
    paths: set[str] = field(default_factory=set)
    unserved: set[str] = field(default_factory=set)
    workflows_read: list[int] = field(default_factory=list)
    seen_nodes: set[int] = field(default_factory=set)

    def project_path(self, project: Project, suffix: str = "") -> str:
        """``<rel_root>/<full_path><suffix>``, as GitLab's path helpers build it."""
        return f"{self.rel_root}/{project.full_path}{suffix}"

    def project_url(self, project: Project, suffix: str = "") -> str:
        """The absolute web URL of a project page."""
        return f"{self.web_root}/{project.full_path}{suffix}"


# -- connections ----------------------------------------------------------------------------------


def encode_cursor(key: int | str) -> str:
    """An opaque keyset cursor like GitLab's: urlsafe base64 of ``{"id":"<key>"}`` without padding."""
    raw = json.dumps({"id": str(key)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The key inside a cursor.

    Raises:
        GraphQLError: "Please provide a valid cursor" (GitLab's keyset pagination message).
    """
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
        return str(value["id"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise GraphQLError("Please provide a valid cursor") from None


class Connection:
    """A relay connection over ``items`` (already in order), paged like graphql-ruby in GitLab.

    ``first``/``last`` are capped at :data:`MAX_PAGE_SIZE`; without either, one page of that
    size. ``visible`` drops nodes after paging (GitLab's redaction of unauthorised nodes), so a
    page may hold fewer nodes than asked while ``pageInfo`` still describes the unredacted page.
    """

    graphql_type = "Connection"

    def __init__(
        self,
        items: Sequence[Any],
        args: Mapping[str, Any],
        *,
        key: Callable[[Any], int | str],
        view: Callable[[Any], Any],
        visible: Callable[[Any], bool] | None = None,
    ) -> None:
        first, last = args.get("first"), args.get("last")
        after, before = args.get("after"), args.get("before")
        for name, value in (("first", first), ("last", last)):
            if value is not None and value < 0:
                raise GraphQLError(f"Argument '{name}' on connection must be greater than or equal to 0")
        keys = [str(key(i)) for i in items]
        start, end = 0, len(items)
        if after is not None:
            k = decode_cursor(after)
            start = keys.index(k) + 1 if k in keys else _position_after(keys, k)
        if before is not None:
            k = decode_cursor(before)
            end = keys.index(k) if k in keys else _position_after(keys, k)
        window = list(range(start, max(start, end)))
        if first is not None:
            window = window[: min(first, MAX_PAGE_SIZE)]
        elif last is not None:
            window = window[max(0, len(window) - min(last, MAX_PAGE_SIZE)) :]
        else:
            window = window[:MAX_PAGE_SIZE]
        self._items = items
        self._total = len(items)
        self._index = window
        self._key = key
        self._view = view
        self._visible = visible
        self._page_end = window[-1] + 1 if window else start
        self._page_start = window[0] if window else start
        self._cached: list[tuple[str, Any]] | None = None

    def _page(self) -> list[tuple[str, Any]]:
        if self._cached is not None:
            return self._cached
        out = []
        for i in self._index:
            item = self._items[i]
            if self._visible is None or self._visible(item):
                out.append((encode_cursor(self._key(item)), item))
        self._cached = out
        return out

    def nodes(self, info: Info) -> list[Any]:
        return [self._view(item) for _, item in self._page()]

    def edges(self, info: Info) -> list[dict[str, Any]]:
        return [{"cursor": cursor, "node": self._view(item)} for cursor, item in self._page()]

    def pageInfo(self, info: Info) -> dict[str, Any]:
        page = self._page()
        return {
            "hasNextPage": self._page_end < self._total,
            "hasPreviousPage": self._page_start > 0,
            "startCursor": page[0][0] if page else None,
            "endCursor": page[-1][0] if page else None,
        }

    def count(self, info: Info, limit: int | None = None) -> int:
        return self._total if limit is None else min(self._total, limit)


def _position_after(keys: list[str], k: str) -> int:
    """Where a cursor for an item no longer in the list falls (keyset: by numeric key)."""
    try:
        wanted = int(k)
        return next((i for i, key in enumerate(keys) if key.isdigit() and int(key) > wanted), len(keys))
    except ValueError:
        raise GraphQLError("Please provide a valid cursor") from None


# -- views ----------------------------------------------------------------------------------------

_STATUS_TEXT = {
    "SUCCESS": ("passed", "Passed"),
    "FAILED": ("failed", "Failed"),
    "RUNNING": ("running", "Running"),
    "PENDING": ("pending", "Pending"),
    "CANCELED": ("canceled", "Canceled"),
    "CANCELING": ("canceling", "Canceling"),
    "SKIPPED": ("skipped", "Skipped"),
    "MANUAL": ("manual action", "Manual"),
    "CREATED": ("created", "Created"),
    "SCHEDULED": ("scheduled", "Scheduled"),
    "PREPARING": ("preparing", "Preparing"),
    "WAITING_FOR_RESOURCE": ("waiting for resource", "Waiting"),
    "WAITING_FOR_CALLBACK": ("waiting for callback", "Waiting"),
}


def detailed_status(
    status: str, ident: str, details_path: str | None, allow_failure: bool = False
) -> dict[str, Any]:
    """A ``DetailedStatus`` object like GitLab's ``Gitlab::Ci::Status`` presenters."""
    lower = status.lower()
    label, text = _STATUS_TEXT.get(status, (lower, lower.capitalize()))
    group = "success-with-warnings" if status == "FAILED" and allow_failure else lower
    return {
        "id": f"{lower}-{ident}",
        "name": status,
        "group": group,
        "icon": f"status_{lower}",
        "label": label,
        "text": text,
        "tooltip": text.lower(),
        "hasDetails": details_path is not None,
        "detailsPath": details_path,
        "favicon": f"/assets/ci_favicons/favicon_status_{lower}.png",
        "action": None,
        "deploymentDetailsPath": None,
    }


def aggregate_status(statuses: Iterable[tuple[str, bool]]) -> str:
    """A composite status of jobs (``Gitlab::Ci::Status::Composite``, simplified)."""
    seen = [s for s, allow in statuses if not (allow and s == "FAILED")]
    for status in ("RUNNING", "PENDING", "CREATED"):
        if status in seen:
            return status
    if "FAILED" in seen:
        return "FAILED"
    if "CANCELED" in seen:
        return "CANCELED"
    if seen and all(s in ("SKIPPED", "MANUAL") for s in seen):
        return "MANUAL" if "MANUAL" in seen else "SKIPPED"
    return "SUCCESS" if seen else "SKIPPED"


class PermissionsView:
    """Any ``*Permissions`` type: read/download abilities for readers, create/update/cancel for
    developers, the rest (admin, destroy, ...) for maintainers."""

    graphql_type = "ProjectPermissions"

    def __init__(self, project: Project, user: User | None) -> None:
        self._project = project
        self._user = user

    def __getattr__(self, name: str) -> bool:
        if name.startswith("_"):
            raise AttributeError(name)
        level = self._project.access(self._user)
        if name.startswith(("read", "download")):
            return self._project.can_read(self._user)
        if name.startswith(("create", "update", "push", "cancel", "play", "retry", "resume")):
            return level >= 30
        return level >= 40


class UserView:
    graphql_type = "UserCore"

    def __init__(self, ctx: Ctx, user: User) -> None:
        self._ctx, self._u = ctx, user
        self.id = gid("User", user.id)
        self.username = user.username
        self.name = user.name
        self.state = "active"
        self.active = True
        self.bot = user.bot
        self.human = not user.bot
        self.admin = user.admin
        self.webPath = f"{ctx.rel_root}/{user.username}"
        self.webUrl = f"{ctx.web_root}/{user.username}"
        self.avatarUrl = None
        self.publicEmail = None
        self.type = "HUMAN"


class GroupView:
    graphql_type = "Group"

    def __init__(self, ctx: Ctx, group: Group) -> None:
        self.id = gid("Group", group.id)
        self.name = group.name
        self.path = group.full_path.rsplit("/", 1)[-1]
        self.fullPath = group.full_path
        self.fullName = " / ".join(part for part in group.full_path.split("/"))
        self.webUrl = f"{ctx.web_root}/groups/{group.full_path}"
        self.webPath = f"{ctx.rel_root}/groups/{group.full_path}"
        self.visibility = group.visibility
        self.description = ""


class ProjectView:
    graphql_type = "Project"

    def __init__(self, ctx: Ctx, project: Project) -> None:
        self._ctx, self._p = ctx, project
        self.id = gid("Project", project.id)
        self.name = project.name
        self.path = project.path
        self.fullPath = project.full_path
        self.nameWithNamespace = " / ".join([*project.full_path.split("/")[:-1], project.name])
        self.description = project.description
        self.visibility = project.visibility
        self.archived = False
        self.createdAt = project.created_at
        self.lastActivityAt = "2026-01-15T10:05:00Z"
        self.webUrl = ctx.project_url(project)
        self.webPath = ctx.project_path(project)
        self.httpUrlToRepo = ctx.project_url(project, ".git")
        self.sshUrlToRepo = (
            f"git@{ctx.web_root.split('://', 1)[-1].split('/')[0].split(':')[0]}:{project.full_path}.git"
        )
        self.ciConfigPathOrDefault = ".gitlab-ci.yml"
        self.duoFeaturesEnabled = project.duo_features_enabled
        self.starCount = 0
        self.forksCount = 0
        self.isForked = False

    def repository(self, info: Info) -> RepositoryView:
        return RepositoryView(self._ctx, self._p)

    def userPermissions(self, info: Info) -> PermissionsView:
        return PermissionsView(self._p, self._ctx.user)

    def group(self, info: Info) -> GroupView | None:
        g = self._ctx.world.group_by_path(self._p.namespace_path)
        return GroupView(self._ctx, g) if g else None

    namespace = group

    def duoContextExclusionSettings(self, info: Info) -> dict[str, Any] | None:
        rules = self._p.exclusion_rules
        return {"exclusionRules": list(rules) if rules is not None else []}

    def pipeline(
        self, info: Info, id: str | None = None, iid: str | None = None, sha: str | None = None
    ) -> PipelineView | None:
        world = self._ctx.world
        found: Pipeline | None = None
        if id is not None:
            pid = gid_id(id)
            found = world.pipelines.get(pid) if pid is not None else None
        elif iid is not None:
            found = next((p for p in world.project_pipelines(self._p.id) if str(p.iid) == str(iid)), None)
        elif sha is not None:
            found = next((p for p in world.project_pipelines(self._p.id) if p.sha.startswith(sha)), None)
        else:
            pipelines = world.project_pipelines(self._p.id)
            found = pipelines[0] if pipelines else None
        if found is None or found.project_id != self._p.id:
            return None
        return PipelineView(self._ctx, found)

    def pipelines(self, info: Info, **args: Any) -> Connection:
        items = self._ctx.world.project_pipelines(self._p.id)
        if args.get("ref"):
            items = [p for p in items if p.ref == args["ref"]]
        if args.get("sha"):
            items = [p for p in items if p.sha == args["sha"]]
        if args.get("status"):
            items = [p for p in items if p.status == args["status"]]
        if args.get("source"):
            items = [p for p in items if p.source == args["source"]]
        if args.get("username"):
            items = [p for p in items if p.user == args["username"]]
        return Connection(items, args, key=lambda p: p.id, view=lambda p: PipelineView(self._ctx, p))

    def duoWorkflowWorkflows(self, info: Info, **args: Any) -> Connection | None:
        return resolve_workflows(self._ctx, args, project=self._p)

    def ciPipelineCreationInputs(
        self, info: Info, ref: str, failOnCacheMiss: bool | None = None
    ) -> list[dict[str, Any]] | None:
        commit = self._p.repository.resolve(ref)
        if commit is None or ".gitlab-ci.yml" not in commit.tree:
            return None
        spec, _config, _error = parse_ci_config(commit.tree[".gitlab-ci.yml"].data)
        out = []
        for name, opts in (spec or {}).items():
            opts = opts or {}
            out.append(
                {
                    "name": name,
                    "type": str(opts.get("type", "string")).upper(),
                    "description": opts.get("description"),
                    "required": "default" not in opts,
                    "default": opts.get("default"),
                    "options": opts.get("options"),
                    "regex": opts.get("regex"),
                    "rules": None,
                }
            )
        return out


class RepositoryView:
    graphql_type = "Repository"

    def __init__(self, ctx: Ctx, project: Project) -> None:
        self._ctx, self._p = ctx, project
        repo = project.repository
        self.rootRef = repo.default_branch
        self.exists = True
        self.empty = not repo.commits
        self.branchCount = len(repo.branches)
        self.tagCount = len(repo.tags)
        self.diskPath = None

    def commitCount(self, info: Info) -> int:
        seen, sha = 0, self._p.repository.branches.get(self._p.repository.default_branch)
        while sha:
            seen += 1
            sha = self._p.repository.commits[sha].parent_sha
        return seen

    def branchNames(self, info: Info, searchPattern: str, offset: int, limit: int) -> list[str]:
        # Repository#search_branch_names: a Redis SSCAN MATCH glob (``*`` crosses ``/``).
        names = sorted(n for n in self._p.repository.branches if fnmatch.fnmatchcase(n, searchPattern))
        return names[max(offset, 0) : max(offset, 0) + max(limit, 0)]

    def commit(self, info: Info, ref: str) -> CommitView | None:
        found = self._p.repository.resolve(ref)
        return CommitView(self._ctx, self._p, found) if found else None

    def lastCommit(
        self,
        info: Info,
        path: str | None = None,
        ref: str | None = None,
        refType: str | None = None,
    ) -> CommitView | None:
        repo = self._p.repository
        current = repo.resolve(ref, refType)
        if current is None:
            return None
        if path:
            blob = current.tree.get(path)
            while (
                current.parent_sha
                and (parent := repo.commits.get(current.parent_sha))
                and parent.tree.get(path) is blob
            ):
                current = parent
        return CommitView(self._ctx, self._p, current)

    def blobs(
        self,
        info: Info,
        paths: list[str],
        ref: str | None = None,
        refType: str | None = None,
        **page: Any,
    ) -> Connection:
        if not self._p.can_read(self._ctx.user):
            raise GraphQLError(RESOURCE_NOT_AVAILABLE)
        repo = self._p.repository
        ref = ref if ref is not None else repo.default_branch
        if not valid_ref_name(ref, allow_head=True):
            raise GraphQLError("Ref is not valid")
        commit = repo.resolve(ref, refType)
        found = [(p, commit.tree[p]) for p in paths if p in commit.tree] if commit else []
        if len(paths) > 1 and _requests_any(info, _BLOB_DATA_FIELDS):
            total = sum(b.size for _, b in found)
            if total > BLOBS_TOTAL_LIMIT:
                raise GraphQLError(f"Max blobs size limit exceeded ({human_size(total)} / 20 MB).")
        ref_name = ref
        return Connection(
            found,
            page,
            key=lambda pb: pb[0],
            view=lambda pb: BlobView(self._ctx, self._p, ref_name, pb[0], pb[1]),
        )


def _requests_any(info: Info, names: frozenset[str]) -> bool:
    """Whether the selection under this field (nodes/edges.node) asks for any of ``names``."""
    stack = [sel for node in info.field_nodes if node.selection_set for sel in node.selection_set.selections]
    while stack:
        sel = stack.pop()
        if isinstance(sel, FieldNode):
            if sel.name.value in names:
                return True
            if sel.selection_set:
                stack.extend(sel.selection_set.selections)
        elif isinstance(sel, InlineFragmentNode):
            stack.extend(sel.selection_set.selections)
        elif isinstance(sel, FragmentSpreadNode) and (fragment := info.fragments.get(sel.name.value)):
            stack.extend(fragment.selection_set.selections)
    return False


def human_size(n: int) -> str:
    """``number_to_human_size`` (Rails): 3 significant digits, 1024 steps."""
    units = ["Bytes", "KB", "MB", "GB", "TB"]
    value, unit = float(n), 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{n} Bytes"
    text = f"{value:.3g}"
    return f"{text} {units[unit]}"


_REF_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f ~^:?*\[\\]")


def valid_ref_name(ref: str, *, allow_head: bool = False) -> bool:
    """``Gitlab::GitRefValidator.validate``: git's ref-name rules for ``refs/heads/<ref>``."""
    if not ref or ref.startswith(("refs/heads/", "refs/remotes/", "-")):
        return False
    if ref == "HEAD":
        return allow_head
    if _REF_FORBIDDEN.search(ref) or ".." in ref or "@{" in ref or ref == "@" or "//" in ref:
        return False
    if ref.endswith(("/", ".", ".lock")):
        return False
    return not any(part.startswith(".") or part.endswith(".lock") for part in ref.split("/"))


class BlobView:
    graphql_type = "RepositoryBlob"

    def __init__(self, ctx: Ctx, project: Project, ref: str, path: str, blob: Blob) -> None:
        self._blob = blob
        name = path.rsplit("/", 1)[-1]
        self.path = path
        self.name = name
        self.mode = blob.mode
        self.archived = False
        self.storedExternally = blob.stored_externally
        self.externalStorage = "lfs" if blob.stored_externally else None
        self.lfsOid = blob.lfs_oid
        self.webPath = ctx.project_path(project, f"/-/blob/{ref}/{path}")
        self.rawPath = ctx.project_path(project, f"/-/raw/{ref}/{path}")
        self.blamePath = ctx.project_path(project, f"/-/blame/{ref}/{path}")
        self.historyPath = ctx.project_path(project, f"/-/commits/{ref}/{path}")
        self.permalinkPath = ctx.project_path(project, f"/-/blob/{ref}/{path}")
        self.externalStorageUrl = None
        self.fileType = None
        self.language = _language(name)
        self.canModifyBlob = False
        self.canModifyBlobWithWebIde = False

    def id(self, info: Info) -> str:
        return gid("Blob", self._blob.oid)

    def oid(self, info: Info) -> str:
        return self._blob.oid

    def size(self, info: Info) -> str:
        return str(self._blob.size)

    def rawSize(self, info: Info) -> str:
        return str(self._blob.raw_size)

    def rawTextBlob(self, info: Info) -> str | None:
        return self._blob.text()

    def plainData(self, info: Info) -> str | None:
        return self._blob.text()

    def rawBlob(self, info: Info) -> str:
        text = self._blob.text()
        if text is None:
            first_bad = next((b for b in self._blob.data if b >= 0x80 or b == 0), 0)
            raise GraphQLError(f'"\\x{first_bad:02X}" from ASCII-8BIT to UTF-8')
        return text

    def base64EncodedBlob(self, info: Info) -> str:
        return base64.b64encode(self._blob.data).decode()


def _language(name: str) -> str | None:
    return (
        {
            "py": "python",
            "rb": "ruby",
            "js": "javascript",
            "md": "markdown",
            "yml": "yaml",
            "txt": "plaintext",
        }.get(name.rsplit(".", 1)[-1])
        if "." in name
        else None
    )


class CommitView:
    graphql_type = "Commit"

    def __init__(self, ctx: Ctx, project: Project, commit: Commit) -> None:
        self._ctx, self._p, self._c = ctx, project, commit
        self.id = gid("CommitPresenter", commit.sha)
        self.sha = commit.sha
        self.shortId = commit.sha[:8]
        self.title = commit.title
        self.fullTitle = commit.title
        self.message = commit.message
        self.description = None
        self.authorName = commit.author_name
        self.authorEmail = commit.author_email
        self.authoredDate = commit.authored_at
        self.committedDate = commit.authored_at
        self.committerName = commit.author_name
        self.committerEmail = commit.author_email
        self.parentSha = commit.parent_sha
        self.webPath = ctx.project_path(project, f"/-/commit/{commit.sha}")
        self.webUrl = ctx.project_url(project, f"/-/commit/{commit.sha}")
        self.name = commit.title
        self.hasAgentSession = False

    def author(self, info: Info) -> UserView | None:
        user = self._ctx.world.user_named("alice")
        return UserView(self._ctx, user) if user else None

    def tags(self, info: Info) -> list[str]:
        return sorted(t.name for t in self._p.repository.tags.values() if t.sha == self._c.sha)


class StageView:
    graphql_type = "CiStage"

    def __init__(self, ctx: Ctx, pipeline: Pipeline, name: str) -> None:
        self._ctx, self._pl, self._name = ctx, pipeline, name
        index = pipeline.stages.index(name) if name in pipeline.stages else 0
        self.id = gid("Ci::Stage", pipeline.id * 10 + index)
        self.name = name

    def _jobs(self) -> list[Job]:
        return [j for j in self._pl.latest_jobs() if j.stage == self._name]

    def status(self, info: Info) -> str:
        return aggregate_status((j.status, j.allow_failure) for j in self._jobs()).lower()

    def detailedStatus(self, info: Info) -> dict[str, Any]:
        status = aggregate_status((j.status, j.allow_failure) for j in self._jobs())
        return detailed_status(status, f"{self._pl.id}-{self._name}", None)

    def jobs(self, info: Info, **args: Any) -> Connection:
        return Connection(
            self._jobs(), args, key=lambda j: j.id, view=lambda j: JobView(self._ctx, self._pl, j)
        )


_FAILURE_MESSAGES = {
    "script_failure": "There has been a script failure. Check the job log for more information",
    "downstream_pipeline_creation_failed": "The downstream pipeline could not be created",
}


class JobView:
    graphql_type = "CiJob"

    def __init__(self, ctx: Ctx, pipeline: Pipeline, job: Job) -> None:
        self._ctx, self._pl, self._j = ctx, pipeline, job
        project = ctx.world.projects[pipeline.project_id]
        self._project = project
        self.id = gid(job.model_name, job.id)
        self.name = job.name
        self.status = job.status
        self.kind = job.kind
        self.allowFailure = job.allow_failure
        self.retried = job.retried
        self.active = job.status in CANCELABLE_STATUSES
        self.cancelable = job.status in CANCELABLE_STATUSES
        self.retryable = job.status in ("FAILED", "CANCELED", "SUCCESS") and job.kind == "BUILD"
        self.playable = job.status == "MANUAL"
        self.canPlayJob = job.status == "MANUAL" and project.can_update_pipeline(ctx.user)
        self.manualJob = job.when == "manual"
        self.scheduled = False
        self.stuck = False
        self.triggered = job.kind == "BRIDGE"
        self.createdByTag = pipeline.tag
        self.createdAt = job.created_at
        self.queuedAt = job.created_at
        self.startedAt = job.started_at
        self.finishedAt = job.finished_at
        self.erasedAt = None
        self.scheduledAt = None
        self.duration = job.duration
        self.queuedDuration = 5.0 if job.started_at else None
        self.coverage = None
        self.exitCode = 1 if job.status == "FAILED" else (0 if job.status == "SUCCESS" else None)
        self.failureMessage = (
            _FAILURE_MESSAGES.get(job.failure_reason or "") if job.status == "FAILED" else None
        )
        self.refName = pipeline.ref
        self.refPath = ctx.project_path(project, f"/-/commits/{pipeline.ref}")
        self.shortSha = pipeline.sha[:8]
        self.commitPath = ctx.project_path(project, f"/-/commit/{pipeline.sha}")
        self.source = pipeline.source
        self.tags = list(job.tags)
        self.schedulingType = "stage"
        self.webPath = ctx.project_path(project, f"/-/jobs/{job.id}")
        self.retryPath = ctx.project_path(project, f"/-/jobs/{job.id}/retry") if self.retryable else None
        self.playPath = ctx.project_path(project, f"/-/jobs/{job.id}/play") if self.playable else None
        self.browseArtifactsPath = None

    def stage(self, info: Info) -> StageView:
        return StageView(self._ctx, self._pl, self._j.stage)

    def detailedStatus(self, info: Info) -> dict[str, Any]:
        return detailed_status(self._j.status, str(self._j.id), self.webPath, self._j.allow_failure)

    def pipeline(self, info: Info) -> PipelineView:
        return PipelineView(self._ctx, self._pl)

    def project(self, info: Info) -> ProjectView:
        return ProjectView(self._ctx, self._project)

    def downstreamPipeline(self, info: Info) -> PipelineView | None:
        pid = self._j.downstream_pipeline_id
        target = self._ctx.world.pipelines.get(pid) if pid else None
        return readable_pipeline(self._ctx, target)

    def userPermissions(self, info: Info) -> dict[str, bool]:
        can_update = self._project.can_update_pipeline(self._ctx.user)
        return {
            "readBuild": True,
            "readJobArtifacts": True,
            "updateBuild": can_update,
            "cancelBuild": can_update,
        }


def _suite_counts(name: str, jobs: list[Job]) -> dict[str, Any]:
    """A ``TestSuiteSummary`` of ``jobs``' reports."""
    cases = [c for j in jobs for c in j.test_cases]

    def count(status: str) -> int:
        return sum(1 for c in cases if c.status == status)

    return {
        "name": name,
        "buildIds": [str(j.id) for j in jobs],
        "totalCount": len(cases),
        "successCount": count("success"),
        "failedCount": count("failed"),
        "skippedCount": count("skipped"),
        "errorCount": count("error"),
        "totalTime": round(sum(c.execution_time for c in cases), 2),
        "suiteError": None,
    }


def _test_case(case: TestCase) -> dict[str, Any]:
    return {
        "name": case.name,
        "classname": case.classname,
        "file": case.file,
        "status": case.status,
        "stackTrace": case.stack_trace,
        "executionTime": case.execution_time,
        "systemOutput": case.system_output,
        "attachmentUrl": None,
        "recentFailures": None,
    }


def readable_pipeline(ctx: Ctx, pipeline: Pipeline | None) -> PipelineView | None:
    """A view of ``pipeline`` when the caller may read its project (``read_pipeline``), else None."""
    if pipeline is None:
        return None
    project = ctx.world.projects.get(pipeline.project_id)
    if project is None or not project.can_read(ctx.user):
        return None
    return PipelineView(ctx, pipeline)


class PipelineView:
    graphql_type = "Pipeline"

    def __init__(self, ctx: Ctx, pipeline: Pipeline) -> None:
        self._ctx, self._pl = ctx, pipeline
        project = ctx.world.projects[pipeline.project_id]
        self._project = project
        latest = pipeline.latest_jobs()
        self.id = gid("Ci::Pipeline", pipeline.id)
        self.iid = str(pipeline.iid)
        self.status = pipeline.status
        self.ref = pipeline.ref
        self.source = pipeline.source
        self.name = pipeline.name
        self.path = ctx.project_path(project, f"/-/pipelines/{pipeline.id}")
        self.commitPath = ctx.project_path(project, f"/-/commit/{pipeline.sha}")
        self.refPath = f"refs/{'tags' if pipeline.tag else 'heads'}/{pipeline.ref}"
        self.refText = f'For <a class="ref-container" href="{self.path}">{pipeline.ref}</a>'
        self.createdAt = pipeline.created_at
        self.updatedAt = pipeline.finished_at or pipeline.started_at or pipeline.created_at
        self.startedAt = pipeline.started_at
        self.finishedAt = pipeline.finished_at
        self.committedAt = pipeline.created_at
        self.duration = pipeline.duration
        self.queuedDuration = 30.0 if pipeline.started_at else None
        self.coverage = None
        self.beforeSha = "0" * 40
        self.configSource = pipeline.config_source
        self.cancelable = pipeline.cancelable
        self.retryable = pipeline.retryable
        self.active = pipeline.status in CANCELABLE_STATUSES
        self.complete = pipeline.status in ("SUCCESS", "FAILED", "CANCELED", "SKIPPED")
        self.child = pipeline.source == "parent_pipeline"
        self.latest = True
        self.stuck = False
        self.trigger = pipeline.source == "trigger"
        self.type = "child" if self.child else "main"
        self.warnings = any(j.status == "FAILED" and j.allow_failure for j in latest)
        self.yamlErrors = False
        self.yamlErrorMessages = None
        self.failureReason = None
        self.usesNeeds = False
        self.hasManualActions = any(j.status == "MANUAL" for j in latest)
        self.hasScheduledActions = False
        self.failedJobsCount = sum(1 for j in latest if j.status == "FAILED")
        self.totalJobs = len(latest)
        self.mergeRequest = None
        self.mergeRequestEventType = None
        self.computeMinutes = None
        self.triggeredByPath = None

    def sha(self, info: Info, format: str | None = None) -> str:
        return self._pl.sha[:8] if format == "SHORT" else self._pl.sha

    def project(self, info: Info) -> ProjectView:
        return ProjectView(self._ctx, self._project)

    def user(self, info: Info) -> UserView | None:
        user = self._ctx.world.user_named(self._pl.user)
        return UserView(self._ctx, user) if user else None

    def commit(self, info: Info) -> CommitView | None:
        c = self._project.repository.commits.get(self._pl.sha)
        return CommitView(self._ctx, self._project, c) if c else None

    def detailedStatus(self, info: Info) -> dict[str, Any]:
        return detailed_status(self._pl.status, str(self._pl.id), self.path)

    def userPermissions(self, info: Info) -> dict[str, bool]:
        can = self._project.can_update_pipeline(self._ctx.user)
        admin = self._project.access(self._ctx.user) >= 40
        return {
            "adminPipeline": admin,
            "cancelPipeline": can,
            "destroyPipeline": admin,
            "updatePipeline": can,
        }

    def jobs(self, info: Info, **args: Any) -> Connection:
        jobs = self._pl.jobs
        if args.get("jobKind"):
            jobs = [j for j in jobs if j.kind == args["jobKind"]]
        if args.get("statuses") is not None:
            wanted = set(args["statuses"])
            jobs = [j for j in jobs if j.status in wanted]
        if args.get("retried") is not None:
            jobs = [j for j in jobs if j.retried == args["retried"]]
        if args.get("whenExecuted") is not None:
            jobs = [j for j in jobs if j.when in set(args["whenExecuted"])]
        return Connection(jobs, args, key=lambda j: j.id, view=lambda j: JobView(self._ctx, self._pl, j))

    def testReportSummary(self, info: Info) -> dict[str, Any]:
        """``Pipeline.testReportSummary``: the latest builds' JUnit reports, one suite per
        ``test_suite_name`` (parallel jobs together), as ``Ci::BuildReportResultService`` sums them."""
        suites: dict[str, list[Job]] = {}
        for job in self._pl.latest_jobs():
            if job.kind == "BUILD" and job.test_cases:
                suites.setdefault(job.test_suite_name, []).append(job)
        summaries = [_suite_counts(name, jobs) for name, jobs in suites.items()]
        total = {
            "count": sum(s["totalCount"] for s in summaries),
            "success": sum(s["successCount"] for s in summaries),
            "failed": sum(s["failedCount"] for s in summaries),
            "skipped": sum(s["skippedCount"] for s in summaries),
            "error": sum(s["errorCount"] for s in summaries),
            "time": round(sum(s["totalTime"] for s in summaries), 2),
            "suiteError": None,
        }
        return {
            "total": total,
            "testSuites": lambda info, **args: Connection(
                summaries, args, key=lambda s: summaries.index(s), view=lambda s: s
            ),
        }

    def testSuite(self, info: Info, buildIds: list[str]) -> dict[str, Any] | None:
        """``Pipeline.testSuite(buildIds:)``: the reports of those latest builds merged into one suite
        (``Resolvers::Ci::TestSuiteResolver``), its cases errors and failures first; null when
        none of the ids is a latest build of this pipeline."""
        wanted = {int(b) for b in buildIds if str(b).isdigit()}
        jobs = [j for j in self._pl.latest_jobs() if j.id in wanted and j.kind == "BUILD"]
        if not jobs:
            return None
        order = {"error": 0, "failed": 1, "success": 2, "skipped": 3}
        cases = sorted((c for j in jobs for c in j.test_cases), key=lambda c: order.get(c.status, 4))
        suite = _suite_counts(jobs[0].test_suite_name, jobs)
        del suite["buildIds"]
        suite["testCases"] = lambda info, **args: Connection(
            cases, args, key=lambda c: cases.index(c), view=_test_case
        )
        return suite

    def job(self, info: Info, id: str | None = None, name: str | None = None) -> JobView | None:
        jid = gid_id(id) if id else None
        for j in self._pl.jobs:
            if (jid is not None and j.id == jid) or (name is not None and j.name == name and not j.retried):
                return JobView(self._ctx, self._pl, j)
        return None

    def stages(self, info: Info, **args: Any) -> Connection:
        return Connection(
            self._pl.stages,
            args,
            key=lambda s: self._pl.stages.index(s),
            view=lambda s: StageView(self._ctx, self._pl, s),
        )

    def downstream(self, info: Info, **args: Any) -> Connection:
        world = self._ctx.world
        return Connection(
            world.downstream_of(self._pl),
            args,
            key=lambda p: p.id,
            view=lambda p: PipelineView(self._ctx, p),
            visible=lambda p: readable_pipeline(self._ctx, p) is not None,
        )

    def upstream(self, info: Info) -> PipelineView | None:
        up = self._ctx.world.pipelines.get(self._pl.upstream_id) if self._pl.upstream_id else None
        return readable_pipeline(self._ctx, up)

    def sourceJob(self, info: Info) -> JobView | None:
        up = self._ctx.world.pipelines.get(self._pl.upstream_id) if self._pl.upstream_id else None
        if up is None or readable_pipeline(self._ctx, up) is None:
            return None
        bridge = next((j for j in up.jobs if j.downstream_pipeline_id == self._pl.id), None)
        return JobView(self._ctx, up, bridge) if bridge else None


# -- Duo workflows --------------------------------------------------------------------------------


class MessageView:
    graphql_type = "DuoMessage"

    def __init__(self, workflow: DuoWorkflow, index: int, message: DuoMessage) -> None:
        self.content = message.content
        self.messageType = message.message_type
        self.role = message.role
        self.status = message.status
        self.messageId = message.message_id or f"{workflow.id}-{index + 1}"
        self.messageSubType = message.message_sub_type
        self.toolInfo = message.tool_info
        self.timestamp = message.timestamp
        self.correlationId = message.correlation_id
        self.additionalContext = None
        self.componentName = None
        self.alternativeCount = None
        self.parentTs = None
        self.threadTs = message.timestamp
        self.subsessionId = None


class CheckpointView:
    graphql_type = "DuoWorkflowEvent"

    def __init__(self, workflow: DuoWorkflow) -> None:
        self._wf = workflow
        msgs = [MessageView(workflow, i, m) for i, m in enumerate(workflow.messages)]
        self.duoMessages = msgs
        self.lastDuoMessage = msgs[-1] if msgs else None
        self.errors = list(workflow.checkpoint_errors)
        self.executionStatus = workflow.status_name
        self.workflowStatus = workflow.status
        self.workflowGoal = workflow.goal
        self.workflowDefinition = workflow.workflow_definition
        self.checkpointNs = ""
        self.currentThread = 0
        self.threadTs = workflow.updated_at
        self.parentTs = None
        self.metadata = json.dumps({"source": "standin"})

    def checkpoint(self, info: Info) -> str:
        chat_log = [
            {
                "message_type": m.message_type,
                "content": m.content,
                "role": m.role,
                "status": m.status,
                "timestamp": m.timestamp,
                "tool_info": m.tool_info,
            }
            for m in self._wf.messages
        ]
        return json.dumps({"channel_values": {"status": self._wf.status_name, "ui_chat_log": chat_log}})


class WorkflowView:
    graphql_type = "DuoWorkflow"

    def __init__(self, ctx: Ctx, workflow: DuoWorkflow) -> None:
        self._ctx, self._wf = ctx, workflow
        project = ctx.world.projects[workflow.project_id]
        self._project = project
        self.id = gid("Ai::DuoWorkflows::Workflow", workflow.id)
        self.status = workflow.status
        self.statusName = workflow.status_name
        self.statusGroup = workflow.status_group
        self.humanStatus = workflow.status_name.replace("_", " ")
        self.webUrl = ctx.project_url(project, f"/-/automate/agent-sessions/{workflow.id}")
        self.projectId = gid("Project", project.id)
        self.goal = workflow.goal
        self.title = workflow.title
        self.workflowDefinition = workflow.workflow_definition
        self.environment = workflow.environment
        self.createdAt = workflow.created_at
        self.updatedAt = workflow.updated_at
        self.archived = False
        self.stalled = False
        self.mcpEnabled = True
        self.allowAgentToRequestUser = True
        self.agentPrivilegesNames = [
            "read_write_files",
            "read_only_gitlab",
            "read_write_gitlab",
            "run_commands",
        ]
        self.preApprovedAgentPrivilegesNames = ["read_write_files", "read_only_gitlab"]
        self.lastExecutorLogsUrl = None
        self.allExecutorLogsUrls: list[str] = []
        user = ctx.world.user_named(workflow.user)
        self.userId = gid("User", user.id if user else 0)

    def project(self, info: Info) -> ProjectView:
        return ProjectView(self._ctx, self._project)

    def user(self, info: Info) -> UserView | None:
        user = self._ctx.world.user_named(self._wf.user)
        return UserView(self._ctx, user) if user else None

    def latestCheckpoint(self, info: Info, checkpointNs: str | None = None) -> CheckpointView | None:
        if self._wf.status == "CREATED" and not self._wf.messages:
            return None
        return CheckpointView(self._wf)

    firstCheckpoint = latestCheckpoint

    def userPermissions(self, info: Info) -> dict[str, bool]:
        return {
            "readDuoWorkflow": True,
            "resumeDuoWorkflow": True,
            "updateDuoWorkflow": True,
            "deleteDuoWorkflow": True,
        }


def resolve_workflows(ctx: Ctx, args: Mapping[str, Any], project: Project | None = None) -> Connection:
    """``duoWorkflowWorkflows`` on ``Query`` or ``Project``, as GitLab's WorkflowsResolver.

    With ``workflowId``: that one workflow, or (missing / not readable) the resource-not-available
    error; with ``Settings.duo_not_found == "empty"`` an empty list instead. Otherwise the
    caller's readable workflows, newest first, filtered by the other arguments.
    """
    world = ctx.world

    def readable(w: DuoWorkflow) -> bool:
        return w.can_read(ctx.user, world.projects[w.project_id])

    if ctx.user is None:
        return Connection([], args, key=lambda w: w.id, view=lambda w: WorkflowView(ctx, w))
    if args.get("workflowId") is not None:
        wid = gid_id(args["workflowId"])
        wf = world.workflows.get(wid) if wid is not None else None
        if wf is None or not readable(wf) or (project is not None and wf.project_id != project.id):
            if world.settings.duo_not_found == "error":
                raise GraphQLError(RESOURCE_NOT_AVAILABLE)
            items: list[DuoWorkflow] = []
        else:
            items = [wf]
    else:
        items = sorted((w for w in world.workflows.values() if readable(w)), key=lambda w: w.id, reverse=True)
        if project is not None:
            items = [w for w in items if w.project_id == project.id]
        if args.get("projectPath"):
            p = world.project_by_path(args["projectPath"])
            items = [w for w in items if p is not None and w.project_id == p.id]
        if args.get("ids") is not None:
            wanted = {gid_id(i) for i in args["ids"]}
            items = [w for w in items if w.id in wanted]
        if args.get("statusGroup"):
            items = [w for w in items if w.status_group == args["statusGroup"]]
        if args.get("type"):
            items = [w for w in items if w.workflow_definition == args["type"]]
        if args.get("excludeTypes"):
            items = [w for w in items if w.workflow_definition not in set(args["excludeTypes"])]
        if args.get("environment"):
            items = [w for w in items if w.environment == args["environment"]]
        if args.get("search"):
            needle = str(args["search"]).lower()
            items = [w for w in items if needle in (w.goal + " " + (w.title or "")).lower()]
        sort = str(args.get("sort") or "created_desc").lower()
        if sort in ("created_asc", "updated_asc"):
            items.reverse()
    ctx.workflows_read.extend(w.id for w in items)
    return Connection(items, args, key=lambda w: w.id, view=lambda w: WorkflowView(ctx, w))


# -- mutations ------------------------------------------------------------------------------------

_CI_RESERVED = frozenset(
    {
        "stages",
        "variables",
        "default",
        "include",
        "workflow",
        "image",
        "services",
        "before_script",
        "after_script",
        "cache",
        "spec",
        "pages:deploy",
    }
)


def parse_ci_config(data: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None]:
    """``(spec inputs, config, error)`` of a ``.gitlab-ci.yml``, with GitLab's error wording."""
    try:
        docs = [d for d in yaml.safe_load_all(data.decode("utf-8")) if d is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        return None, None, f"(<unknown>): {exc.problem or exc}{where}"
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return None, None, f"Invalid configuration format: {exc}"
    spec: dict[str, Any] | None = None
    if len(docs) > 1 and isinstance(docs[0], dict) and "spec" in docs[0]:
        spec = (docs[0]["spec"] or {}).get("inputs") or {}
        docs = docs[1:]
    config = docs[0] if docs else None
    if not isinstance(config, dict):
        return spec, None, "Invalid configuration format"
    for name, job in config.items():
        if name in _CI_RESERVED or str(name).startswith("."):
            continue
        if not isinstance(job, dict) or not ({"script", "run", "trigger"} & set(job)):
            return spec, config, f"jobs:{name} config should implement the script:, run:, or trigger: keyword"
    return spec, config, None


def create_pipeline(
    world: World,
    user: User | None,
    project: Project,
    ref: str,
    variables: list[dict[str, Any]],
    inputs: list[dict[str, Any]],
) -> Pipeline | str:
    """A new pipeline for ``ref`` (GitLab's ``Ci::CreatePipelineService``), or why there is none.

    ``variables`` and ``inputs`` are kept as GraphQL takes them (``{key, value, variableType}``,
    ``{name, value}``); the caller checked that ``user`` may create pipelines in ``project``.
    """
    repo = project.repository
    name = ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
    sha = repo.branches.get(name) or (repo.tags[name].sha if name in repo.tags else None)
    if sha is None:
        return "Reference not found"
    commit = repo.commits[sha]
    ci = commit.tree.get(".gitlab-ci.yml")
    if ci is None:
        return "Missing CI config file"
    _spec, config, error = parse_ci_config(ci.data)
    if error or config is None:
        return error or "Invalid configuration format"
    stages = list(config.get("stages") or ["build", "test", "deploy"])
    pipeline = Pipeline(
        id=world.next_pipeline_id,
        iid=max((p.iid for p in world.project_pipelines(project.id)), default=0) + 1,
        project_id=project.id,
        ref=name,
        sha=sha,
        status="CREATED",
        source="api",
        stages=stages,
        tag=name in repo.tags and name not in repo.branches,
        user=user.username if user else "",
        variables=[dict(v) for v in variables],
        inputs=[dict(i) for i in inputs],
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        started_at=None,
        finished_at=None,
        duration=None,
    )
    for job_name, job in config.items():
        if job_name in _CI_RESERVED or str(job_name).startswith(".") or not isinstance(job, dict):
            continue
        pipeline.jobs.append(
            Job(
                id=world.next_job_id,
                name=str(job_name),
                stage=str(job.get("stage", "test")),
                status="MANUAL" if job.get("when") == "manual" else "CREATED",
                kind="BRIDGE" if "trigger" in job else "BUILD",
                when=str(job.get("when", "on_success")),
                started_at=None,
                finished_at=None,
                duration=None,
                created_at=pipeline.created_at,
            )
        )
        world.next_job_id += 1
    world.pipelines[pipeline.id] = pipeline
    world.created_pipeline_ids.append(pipeline.id)
    world.next_pipeline_id += 1
    return pipeline


class MutationResolvers:
    """``pipelineCreate``, ``pipelineRetry`` and ``pipelineCancel`` (https://docs.gitlab.com/api/graphql/reference/#mutationpipelinecreate)."""

    def __init__(self, ctx: Ctx) -> None:
        self._ctx = ctx

    def _authorized_pipeline(self, pipeline_gid: str) -> tuple[Pipeline, Project]:
        world, user = self._ctx.world, self._ctx.user
        pid = gid_id(pipeline_gid)
        pipeline = world.pipelines.get(pid) if pid is not None else None
        project = world.projects.get(pipeline.project_id) if pipeline else None
        if (
            pipeline is None
            or project is None
            or not project.can_read(user)
            or not project.can_update_pipeline(user)
        ):
            raise GraphQLError(RESOURCE_NOT_AVAILABLE)
        return pipeline, project

    def pipelineCreate(self, info: Info, input: dict[str, Any]) -> dict[str, Any]:
        ctx, world = self._ctx, self._ctx.world
        project = world.project_by_path(input["projectPath"])
        if project is None or not project.can_read(ctx.user) or not project.can_update_pipeline(ctx.user):
            raise GraphQLError(RESOURCE_NOT_AVAILABLE)
        payload: dict[str, Any] = {"clientMutationId": input.get("clientMutationId"), "requestId": None}
        created = create_pipeline(
            world, ctx.user, project, input["ref"], input.get("variables") or [], input.get("inputs") or []
        )
        if isinstance(created, str):
            return {**payload, "pipeline": None, "errors": [created]}
        if input.get("async"):
            return {**payload, "pipeline": None, "errors": [], "requestId": f"standin-request-{created.id}"}
        return {**payload, "pipeline": PipelineView(ctx, created), "errors": []}

    def pipelineRetry(self, info: Info, input: dict[str, Any]) -> dict[str, Any]:
        pipeline, _project = self._authorized_pipeline(input["id"])
        base = {"clientMutationId": input.get("clientMutationId")}
        if not pipeline.retryable:
            return {
                **base,
                "pipeline": PipelineView(self._ctx, pipeline),
                "errors": ["Pipeline is not retryable"],
            }
        world = self._ctx.world
        for job in list(pipeline.latest_jobs()):
            if job.status in ("FAILED", "CANCELED") and job.kind == "BUILD":
                world.retry_job(pipeline, job)
            elif job.status == "SKIPPED":
                job.status = "CREATED"
        pipeline.status = "RUNNING"
        pipeline.finished_at = None
        pipeline.duration = None
        return {**base, "pipeline": PipelineView(self._ctx, pipeline), "errors": []}

    def pipelineCancel(self, info: Info, input: dict[str, Any]) -> dict[str, Any]:
        pipeline, _project = self._authorized_pipeline(input["id"])
        base = {"clientMutationId": input.get("clientMutationId")}
        if not pipeline.cancelable:
            return {**base, "pipeline": None, "errors": ["Pipeline is not cancelable"]}
        for job in pipeline.latest_jobs():
            if job.status in CANCELABLE_STATUSES:
                job.status = "CANCELED"
        pipeline.status = "CANCELED"
        pipeline.finished_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {**base, "pipeline": PipelineView(self._ctx, pipeline), "errors": []}


class Root(MutationResolvers):
    """The root value for queries and mutations alike."""

    graphql_type = "Query"

    def project(self, info: Info, fullPath: str) -> ProjectView | None:
        project = self._ctx.world.project_by_path(fullPath)
        if project is None or not project.can_read(self._ctx.user):
            return None
        return ProjectView(self._ctx, project)

    def projects(self, info: Info, **args: Any) -> Connection:
        """``Query.projects``: readable projects, newest first, filtered like ProjectsResolver.

        ``ids`` are project global IDs (``GitlabSchema.parse_gids(ids, expected_type: Project)``).
        """
        ctx, world = self._ctx, self._ctx.world
        items = sorted((p for p in world.projects.values() if p.can_read(ctx.user)), key=lambda p: -p.id)
        if args.get("ids") is not None:
            wanted = set()
            for value in args["ids"]:
                m = _GID.match(value)
                if m is None:
                    raise GraphQLError(f"{value} is not a valid Global ID")
                if m["model"] != "Project":
                    raise GraphQLError(f"{value} is not a valid ID for Project.")
                wanted.add(m["id"])
            items = [p for p in items if str(p.id) in wanted]
        if args.get("fullPaths") is not None:
            paths = {fp.lower() for fp in args["fullPaths"]}
            items = [p for p in items if p.full_path.lower() in paths]
        if args.get("search"):
            needle = str(args["search"]).lower()
            items = [p for p in items if needle in p.name.lower() or needle in p.full_path.lower()]
        if args.get("membership"):
            items = [p for p in items if p.access(ctx.user) > 0]
        if args.get("namespacePath"):
            prefix = str(args["namespacePath"]).lower() + "/"
            items = [p for p in items if p.full_path.lower().startswith(prefix)]
        return Connection(items, args, key=lambda p: p.id, view=lambda p: ProjectView(ctx, p))

    def group(self, info: Info, fullPath: str) -> GroupView | None:
        group = self._ctx.world.group_by_path(fullPath)
        if group is None:
            return None
        # A private group is visible to members of any of its projects (simplified).
        visible = any(
            p.can_read(self._ctx.user)
            for p in self._ctx.world.projects.values()
            if p.full_path.startswith(group.full_path + "/")
        )
        return GroupView(self._ctx, group) if visible else None

    namespace = group

    def currentUser(self, info: Info) -> UserView | None:
        return UserView(self._ctx, self._ctx.user) if self._ctx.user else None

    def duoWorkflowWorkflows(self, info: Info, **args: Any) -> Connection:
        return resolve_workflows(self._ctx, args)

    def metadata(self, info: Info) -> dict[str, Any] | None:
        if self._ctx.user is None:
            return None
        s = self._ctx.world.settings
        return {
            "version": s.version,
            "revision": s.revision,
            "enterprise": s.edition == "ee",
            "kas": {"enabled": False, "externalUrl": None, "externalK8sProxyUrl": None, "version": None},
        }

    def echo(self, info: Info, text: str) -> str:
        who = f'"{self._ctx.user.username}"' if self._ctx.user else "nil"
        return f"{who} says: {text}"


# -- the endpoint ---------------------------------------------------------------------------------


_MISSING = object()


def _field_resolver(source: Any, info: Info, **args: Any) -> Any:
    """graphql-core's default resolver, plus recording of resolved paths and unserved fields."""
    ctx: Ctx = info.context
    node = id(info.field_nodes[0])
    if node not in ctx.seen_nodes:
        # A field node is shared by every item of a list, so its path is built once per request.
        ctx.seen_nodes.add(node)
        keys = []
        path: Any = info.path
        while path is not None:
            if isinstance(path.key, str):
                keys.append(path.key)
            path = path.prev
        ctx.paths.add(".".join(reversed(keys)))
    name = info.field_name
    value = source.get(name, _MISSING) if isinstance(source, Mapping) else getattr(source, name, _MISSING)
    if value is _MISSING:
        ctx.unserved.add(f"{info.parent_type.name}.{name}")
        return None
    if callable(value):
        return value(info, **args)
    return value


def _never_awaitable(value: Any) -> TypeGuard[Awaitable[Any]]:
    # Every resolver is synchronous: skip graphql-core's per-value awaitable check.
    return False


def _type_resolver(value: Any, info: Info, abstract_type: Any) -> str | None:
    return getattr(value, "graphql_type", None)


@dataclass
class OperationRecord:
    """What the request log keeps about one GraphQL operation (never the caller's token)."""

    operation_name: str | None
    operation_type: str | None
    fields: list[str]
    variables: dict[str, Any]
    valid: bool
    errors: list[str]
    paths: list[str] = field(default_factory=list)
    unserved: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "operation_name": self.operation_name,
            "operation_type": self.operation_type,
            "fields": self.fields,
            "variables": self.variables,
            "valid": self.valid,
            "errors": self.errors,
            "paths": self.paths,
            "unserved": self.unserved,
        }


@dataclass
class GraphQLOutcome:
    """The response payload of one GraphQL HTTP request, and its records."""

    payload: Any
    records: list[OperationRecord]
    invalid: list[str]
    """Why the request was not a valid GraphQL request (empty when it was)."""
    workflows_read: list[int]


class GraphQLEndpoint:
    """Validates and executes GraphQL requests against the schema (documents cached by text)."""

    def __init__(self, schema: GraphQLSchema, *, cache_size: int = 512) -> None:
        self._cache: OrderedDict[str, tuple[DocumentNode | None, list[GraphQLError]]] = OrderedDict()
        self._cache_size = cache_size
        self._depths: dict[tuple[str, str | None], int] = {}
        self.use_schema(schema)

    def use_schema(self, schema: GraphQLSchema) -> None:
        """Validate and execute on ``schema`` from now on (another GitLab version)."""
        self.schema = schema
        self._cache.clear()
        self._depths.clear()

    def document(self, query: str) -> tuple[DocumentNode | None, list[GraphQLError]]:
        """The parsed document and its validation errors (syntax error: None and that error), cached."""
        hit = self._cache.get(query)
        if hit is not None:
            self._cache.move_to_end(query)
            return hit
        try:
            document: DocumentNode | None = parse(query)
            errors = list(validate(self.schema, document)) if document else []
        except GraphQLError as exc:
            document, errors = None, [exc]
        self._cache[query] = (document, errors)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
            self._depths.clear()
        return document, errors

    def run(self, body: Any, make_ctx: Callable[[], Ctx]) -> GraphQLOutcome:
        """Answer a decoded JSON body (one request object, or a list of them: GitLab's multiplex)."""
        if isinstance(body, list):
            outcomes = [self._one(item, make_ctx()) for item in body]
            return GraphQLOutcome(
                payload=[o.payload for o in outcomes],
                records=[r for o in outcomes for r in o.records],
                invalid=[m for o in outcomes for m in o.invalid],
                workflows_read=[w for o in outcomes for w in o.workflows_read],
            )
        return self._one(body, make_ctx())

    def _one(self, body: Any, ctx: Ctx) -> GraphQLOutcome:
        if not isinstance(body, dict):
            return _refused("The request body must be a JSON object with `query`.", None, {})
        query, variables, op_name = body.get("query"), body.get("variables"), body.get("operationName")
        if variables is None:
            variables = {}
        if isinstance(variables, str):
            # GitLab (graphql-ruby controller) accepts variables as a JSON-encoded string.
            try:
                variables = json.loads(variables) if variables else {}
            except ValueError:
                return _refused("Variables are invalid JSON.", op_name, {})
        if not isinstance(variables, dict):
            return _refused("Variables must be a JSON object.", op_name, {})
        if not isinstance(query, str) or not query.strip():
            return _refused("No query string was present", op_name, variables)
        document, errors = self.document(query)
        operation = get_operation_ast(document, op_name) if document is not None and not errors else None
        name, kind, fields = _describe(document, op_name)
        if errors or document is None:
            # GitLab words them as graphql-ruby does, with extensions.code, and answers no `data`.
            answered = ruby_errors(document, errors)
            refusals = [e["message"] for e in answered]
            record = OperationRecord(name, kind, fields, variables, False, refusals)
            return GraphQLOutcome(
                {"errors": answered}, [record], [f"invalid document: {m}" for m in refusals], []
            )
        if operation is None:
            message = (
                f"Unknown operation named '{op_name}'."
                if op_name
                else "Must provide operation name if query contains multiple operations."
            )
            record = OperationRecord(name, kind, fields, variables, False, [message])
            return GraphQLOutcome({"errors": [{"message": message}]}, [record], [message], [])
        depth = self._depths.get((query, op_name))
        if depth is None:
            depth = self._depths[(query, op_name)] = query_depth(document, operation)
        max_depth = MAX_DEPTH_AUTHENTICATED if ctx.user is not None else MAX_DEPTH_ANONYMOUS
        if depth > max_depth:
            message = f"Query has depth of {depth}, which exceeds max depth of {max_depth}"
            record = OperationRecord(name, kind, fields, variables, False, [message])
            return GraphQLOutcome({"errors": [{"message": message}]}, [record], [message], [])
        result: ExecutionResult = execute(
            self.schema,
            document,
            root_value=Root(ctx),
            context_value=ctx,
            variable_values=variables,
            operation_name=op_name,
            field_resolver=_field_resolver,
            is_awaitable=_never_awaitable,
            type_resolver=_type_resolver,
        )  # type: ignore[assignment]
        invalid: list[str] = []
        messages: list[str] = []
        for err in result.errors or []:
            messages.append(err.message)
            original = err.original_error
            if err.path is None:
                # Variable coercion failed: GitLab refuses the request before running it.
                invalid.append(f"invalid variables: {err.message}")
            elif original is not None and not isinstance(original, GraphQLError):
                log.error("stand-in resolver crashed at %s", err.path, exc_info=original)
                invalid.append(f"stand-in bug at {err.path}: {original!r}")
        record = OperationRecord(
            name, kind, fields, variables, not invalid, messages, sorted(ctx.paths), sorted(ctx.unserved)
        )
        payload: dict[str, Any]
        if result.errors and result.data is None and all(e.path is None for e in result.errors):
            # Refused before execution (variables): graphql-ruby answers without a `data` key.
            payload = {"errors": [e.formatted for e in result.errors]}
        else:
            payload = {"data": result.data}
            if result.errors:
                payload["errors"] = [e.formatted for e in result.errors]
        return GraphQLOutcome(payload, [record], invalid, list(ctx.workflows_read))


def query_depth(document: DocumentNode, operation: OperationDefinitionNode) -> int:
    """The deepest field nesting of ``operation`` (fragments expanded), as graphql-ruby counts it."""
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}

    def depth(selections: Iterable[Any], seen: frozenset[str]) -> int:
        best = 0
        for sel in selections:
            if isinstance(sel, FieldNode):
                if sel.name.value.startswith("__"):
                    continue
                inner = depth(sel.selection_set.selections, seen) if sel.selection_set else 0
                best = max(best, 1 + inner)
            elif isinstance(sel, InlineFragmentNode):
                best = max(best, depth(sel.selection_set.selections, seen))
            elif isinstance(sel, FragmentSpreadNode) and sel.name.value not in seen:
                fragment = fragments.get(sel.name.value)
                if fragment is not None:
                    best = max(best, depth(fragment.selection_set.selections, seen | {sel.name.value}))
        return best

    return depth(operation.selection_set.selections, frozenset())


def _refused(message: str, op_name: str | None, variables: dict[str, Any]) -> GraphQLOutcome:
    record = OperationRecord(op_name, None, [], variables, False, [message])
    return GraphQLOutcome({"errors": [{"message": message}]}, [record], [message], [])


def _describe(document: DocumentNode | None, op_name: str | None) -> tuple[str | None, str | None, list[str]]:
    """Name, type and top-level field names of the operation a request selects."""
    if document is None:
        return op_name, None, []
    ops = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    op = (
        next((o for o in ops if o.name and o.name.value == op_name), None)
        if op_name
        else (ops[0] if len(ops) == 1 else None)
    )
    if op is None:
        return op_name, None, []
    fields = [s.name.value for s in op.selection_set.selections if isinstance(s, FieldNode)]
    kind = {
        OperationType.QUERY: "query",
        OperationType.MUTATION: "mutation",
        OperationType.SUBSCRIPTION: "subscription",
    }[op.operation]
    return (op.name.value if op.name else op_name), kind, fields
