"""The stand-in's in-memory GitLab: users, projects, repositories, pipelines, Duo workflows.

Plain dataclasses plus the few rules GitLab applies to them (who may read or change what, how a
ref resolves, what a pipeline's status and counters are). The GraphQL and REST layers
(:mod:`tests.standin.graphql_api`, :mod:`tests.standin.rest_api`) only translate these objects
into GitLab's wire shapes; :mod:`tests.standin.dataset` builds the seed data.

Access levels and abilities follow GitLab's permission table (``doc/user/permissions.md``):
reporters and up read a private project's code and pipelines, developers and up create, retry and
cancel pipelines; public projects are readable by anyone, anonymous callers included. A Duo
workflow is readable by the user who started it, while they can still read its project.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

HEX40 = re.compile(r"^[0-9a-f]{40}$")


class Access(IntEnum):
    """GitLab's member access levels (``Gitlab::Access``)."""

    GUEST = 10
    REPORTER = 20
    DEVELOPER = 30
    MAINTAINER = 40
    OWNER = 50


@dataclass
class User:
    """A GitLab user; ``tokens`` are the personal access tokens that authenticate as them."""

    id: int
    username: str
    name: str
    tokens: tuple[str, ...]
    admin: bool = False
    bot: bool = False


@dataclass
class Group:
    """A group or subgroup (``full_path`` such as ``grp/sub``)."""

    id: int
    full_path: str
    name: str
    visibility: str = "private"


# -- repository -------------------------------------------------------------------------------


@dataclass
class Blob:
    """One file's content in a commit's tree.

    Attributes:
        loader: returns the bytes GitLab has for the blob; for a file GitLab truncated, only the
            part it returns. Lazy so that the 10 MiB file costs nothing until first read.
        lfs_size: set for a Git LFS pointer: the size of the object in LFS storage
            (``rawSize``), while the blob itself is the small pointer text.
        lfs_oid: the LFS object's sha256 (``lfsOid``).
        full_size: set when GitLab truncated the blob: the real size in bytes (``rawSize``),
            larger than what ``loader`` returns.
        mode: the git file mode.
    """

    loader: Callable[[], bytes]
    lfs_size: int | None = None
    lfs_oid: str | None = None
    full_size: int | None = None
    mode: str = "100644"
    _oid: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, data: bytes | str, **kw: object) -> Blob:
        """A blob holding ``data`` (``str`` is UTF-8 encoded as is, line endings kept)."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        return cls(loader=lambda: raw, **kw)  # type: ignore[arg-type]

    @property
    def data(self) -> bytes:
        """The bytes GitLab returns for this blob."""
        return self.loader()

    @property
    def oid(self) -> str:
        """The git blob id (sha1 of ``blob <len>\\0<data>``), as ``git hash-object`` computes it."""
        if self._oid is None:
            data = self.data
            self._oid = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
        return self._oid

    @property
    def size(self) -> int:
        """``RepositoryBlob.size``: the blob's size in the repository (an LFS pointer's own size)."""
        return self.full_size if self.full_size is not None else len(self.data)

    @property
    def raw_size(self) -> int:
        """``RepositoryBlob.rawSize``: the size of the blob, or of its LFS object when stored externally."""
        return self.lfs_size if self.lfs_size is not None else self.size

    @property
    def stored_externally(self) -> bool:
        """True for a Git LFS pointer."""
        return self.lfs_size is not None

    @property
    def is_binary(self) -> bool:
        """GitLab's binary test, simplified: a NUL byte or bytes that are not UTF-8."""
        data = self.data
        if b"\0" in data[:8000]:
            return True
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    def text(self) -> str | None:
        """``rawTextBlob``: the text, or None for binary content."""
        return None if self.is_binary else self.data.decode("utf-8")


@dataclass
class Commit:
    """A commit with its whole tree (path → blob; blobs are shared between commits)."""

    sha: str
    title: str
    message: str
    tree: dict[str, Blob]
    parent_sha: str | None = None
    author_name: str = "Alice Developer"
    author_email: str = "alice@example.com"
    authored_at: str = "2026-01-15T09:00:00Z"


@dataclass
class Tag:
    """An annotated tag pointing at a commit."""

    name: str
    sha: str
    message: str = ""
    created_at: str = "2026-01-10T12:00:00Z"


@dataclass
class Repository:
    """Commits, branches and tags of one project's repository."""

    default_branch: str
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, Tag] = field(default_factory=dict)
    protected_branches: set[str] = field(default_factory=set)

    def resolve(self, ref: str | None, ref_type: str | None = None) -> Commit | None:
        """The commit a revision names, as Gitaly resolves it; None when it names nothing.

        ``ref_type`` ``HEADS``/``TAGS`` (GraphQL ``RefType``) qualifies a bare name as
        ``refs/heads/<ref>``/``refs/tags/<ref>``. Without it: ``HEAD`` (the default branch),
        ``refs/heads/x``, ``refs/tags/x``, then a tag before a branch of the same name (git's
        ``rev-parse`` order), then a full or abbreviated (4+ hex digits, unique) commit SHA.
        """
        if ref is None:
            ref = self.default_branch
        if ref_type == "HEADS":
            sha = self.branches.get(ref.removeprefix("refs/heads/"))
            return self.commits.get(sha) if sha else None
        if ref_type == "TAGS":
            tag = self.tags.get(ref.removeprefix("refs/tags/"))
            return self.commits.get(tag.sha) if tag else None
        if ref == "HEAD":
            return self.commits.get(self.branches[self.default_branch])
        if ref.startswith("refs/heads/"):
            sha = self.branches.get(ref.removeprefix("refs/heads/"))
            return self.commits.get(sha) if sha else None
        if ref.startswith("refs/tags/"):
            tag = self.tags.get(ref.removeprefix("refs/tags/"))
            return self.commits.get(tag.sha) if tag else None
        if ref in self.tags:
            return self.commits[self.tags[ref].sha]
        if ref in self.branches:
            return self.commits[self.branches[ref]]
        if re.fullmatch(r"[0-9a-f]{4,40}", ref):
            matches = [c for sha, c in self.commits.items() if sha.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
        return None

    def commit_file(self, branch: str, path: str, blob: Blob | None, message: str) -> Commit:
        """Commit a change of one file to ``branch`` (``blob`` None deletes it); return the new commit.

        Raises:
            KeyError: no such branch.
        """
        parent = self.commits[self.branches[branch]]
        tree = dict(parent.tree)
        if blob is None:
            tree.pop(path, None)
        else:
            tree[path] = blob
        sha = hashlib.sha1(f"{parent.sha}:{path}:{message}".encode(), usedforsecurity=False).hexdigest()
        commit = Commit(
            sha=sha,
            title=message.splitlines()[0] if message else "",
            message=message,
            tree=tree,
            parent_sha=parent.sha,
        )
        self.commits[sha] = commit
        self.branches[branch] = sha
        return commit


@dataclass
class Project:
    """A project; ``members`` maps usernames to access levels (inherited ones included)."""

    id: int
    full_path: str
    name: str
    description: str
    visibility: str
    members: dict[str, Access]
    repository: Repository
    exclusion_rules: list[str] | None = None
    duo_features_enabled: bool = True
    created_at: str = "2025-06-01T08:00:00Z"

    @property
    def path(self) -> str:
        """The last segment of the full path."""
        return self.full_path.rsplit("/", 1)[-1]

    @property
    def namespace_path(self) -> str:
        """The full path of the group that holds the project."""
        return self.full_path.rsplit("/", 1)[0]

    def access(self, user: User | None) -> int:
        """The caller's access level (0 for none); admins act as owners."""
        if user is None:
            return 0
        if user.admin:
            return Access.OWNER
        return int(self.members.get(user.username, 0))

    def can_read(self, user: User | None) -> bool:
        """``read_project``/``read_code``/``read_pipeline``: public, or reporter and up."""
        return self.visibility == "public" or self.access(user) >= Access.REPORTER

    def can_update_pipeline(self, user: User | None) -> bool:
        """``create_pipeline``/``update_pipeline``/``cancel_pipeline``: developer and up."""
        return self.access(user) >= Access.DEVELOPER


# -- CI -----------------------------------------------------------------------------------------

#: Statuses GitLab counts as still going (``Ci::HasStatus::ACTIVE_STATUSES`` and friends).
CANCELABLE_STATUSES = frozenset(
    {
        "CREATED",
        "WAITING_FOR_RESOURCE",
        "PREPARING",
        "PENDING",
        "RUNNING",
        "SCHEDULED",
        "WAITING_FOR_CALLBACK",
        "CANCELING",
    }
)
COMPLETED_STATUSES = frozenset({"SUCCESS", "FAILED", "CANCELED", "SKIPPED"})


@dataclass
class TestCase:
    """One test case of a job's JUnit report, as GitLab parses it (``status``: ``TestCaseStatus``,
    lowercase: success, failed, skipped, error)."""

    name: str
    classname: str
    status: str = "success"
    file: str | None = None
    stack_trace: str | None = None
    execution_time: float = 0.1
    system_output: str | None = None


@dataclass
class Job:
    """A CI job: a build (runs a script) or a bridge (triggers a downstream pipeline).

    ``test_cases`` is its JUnit report (``artifacts:reports:junit``), empty when it has none.
    """

    id: int
    name: str
    stage: str
    status: str
    kind: str = "BUILD"
    allow_failure: bool = False
    retried: bool = False
    downstream_pipeline_id: int | None = None
    failure_reason: str | None = None
    when: str = "on_success"
    tags: tuple[str, ...] = ("docker",)
    created_at: str = "2026-01-15T09:00:05Z"
    started_at: str | None = "2026-01-15T09:01:00Z"
    finished_at: str | None = "2026-01-15T09:04:00Z"
    duration: int | None = 180
    test_cases: list[TestCase] = field(default_factory=list)

    @property
    def test_suite_name(self) -> str:
        """GitLab's ``test_suite_name``: the job's name without its ``parallel`` index (``rspec 7/30``
        → ``rspec``), so the parallel jobs of one suite report together."""
        return re.sub(r"(\s+\d+[/:]\d+)+$", "", self.name) or self.name

    @property
    def model_name(self) -> str:
        """The Rails class behind the GID (``Ci::Build`` or ``Ci::Bridge``)."""
        return "Ci::Bridge" if self.kind == "BRIDGE" else "Ci::Build"


@dataclass
class Pipeline:
    """A pipeline of one project at one ref; ``jobs`` holds builds and bridges in id order."""

    id: int
    iid: int
    project_id: int
    ref: str
    sha: str
    status: str
    source: str
    jobs: list[Job] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)
    upstream_id: int | None = None
    tag: bool = False
    user: str = "alice"
    name: str | None = None
    variables: list[dict[str, object]] = field(default_factory=list)
    inputs: list[dict[str, object]] = field(default_factory=list)
    created_at: str = "2026-01-15T09:00:00Z"
    started_at: str | None = "2026-01-15T09:00:30Z"
    finished_at: str | None = "2026-01-15T09:20:00Z"
    duration: int | None = 1170
    config_source: str = "REPOSITORY_SOURCE"

    def latest_jobs(self) -> list[Job]:
        """Jobs that were not retried (GitLab's ``latest`` scope)."""
        return [j for j in self.jobs if not j.retried]

    @property
    def cancelable(self) -> bool:
        """``Ci::Pipeline#cancelable?``: some job or the pipeline itself is still going."""
        return self.status in CANCELABLE_STATUSES or any(
            j.status in CANCELABLE_STATUSES for j in self.latest_jobs()
        )

    @property
    def retryable(self) -> bool:
        """``Ci::Pipeline#retryable?``: a latest job failed or was canceled."""
        return any(j.status in ("FAILED", "CANCELED") for j in self.latest_jobs())


# -- Duo workflows ------------------------------------------------------------------------------

#: ``Ai::DuoWorkflows::Workflow`` status → ``DuoWorkflowStatusGroup`` (GitLab EE, workflow model).
STATUS_GROUPS: dict[str, str] = {
    "CREATED": "ACTIVE",
    "RUNNING": "ACTIVE",
    "PAUSED": "PAUSED",
    "INPUT_REQUIRED": "AWAITING_INPUT",
    "PLAN_APPROVAL_REQUIRED": "AWAITING_INPUT",
    "TOOL_CALL_APPROVAL_REQUIRED": "AWAITING_INPUT",
    "FINISHED": "COMPLETED",
    "FAILED": "FAILED",
    "STOPPED": "CANCELED",
}


@dataclass
class DuoMessage:
    """One entry of a checkpoint's ``ui_chat_log`` (GraphQL ``DuoMessage``)."""

    content: str
    message_type: str
    role: str | None = None
    status: str | None = "success"
    message_id: str | None = None
    message_sub_type: str | None = None
    tool_info: str | None = None
    timestamp: str = "2026-01-15T10:00:00Z"
    correlation_id: str | None = None


@dataclass
class DuoWorkflow:
    """A Duo Agent Platform session (``Ai::DuoWorkflows::Workflow``)."""

    id: int
    project_id: int
    user: str
    status: str
    goal: str
    workflow_definition: str = "software_development"
    environment: str = "WEB"
    title: str | None = None
    messages: list[DuoMessage] = field(default_factory=list)
    checkpoint_errors: list[str] = field(default_factory=list)
    created_at: str = "2026-01-15T10:00:00Z"
    updated_at: str = "2026-01-15T10:05:00Z"
    #: Pending scripted states (see the control API): applied one per read of this workflow.
    script: list[dict[str, object]] = field(default_factory=list)

    @property
    def status_name(self) -> str:
        """``statusName``: the state machine's name, lowercase with underscores (``input_required``)."""
        return self.status.lower()

    @property
    def status_group(self) -> str:
        """``statusGroup``: the :data:`STATUS_GROUPS` bucket of the status."""
        return STATUS_GROUPS[self.status]

    def can_read(self, user: User | None, project: Project) -> bool:
        """``read_duo_workflow``: the workflow's own user, while they can read the project."""
        return user is not None and (user.username == self.user or user.admin) and project.can_read(user)


# -- the world ----------------------------------------------------------------------------------


@dataclass
class Settings:
    """Switches that change how the stand-in answers (see the control API)."""

    #: How ``duoWorkflowWorkflows(workflowId:)`` answers for a workflow that is missing or not
    #: readable: ``error`` (GitLab's resolver raises "resource not available", the default) or
    #: ``empty`` (an empty ``nodes`` list, as the ``ids:`` filter does).
    duo_not_found: str = "error"
    #: What ``metadata``/``GET /version`` answer; set from the stand-in's GitLab band on reset.
    version: str = "19.4.0-pre"
    #: ``ee`` or ``ce`` (``metadata { enterprise }``); set from the band, as ``version``.
    edition: str = "ee"
    revision: str = "8d2b1f4e0c1"
    #: Whether ``GET /projects/:id/jobs/:job_id/artifacts/tree`` exists (GitLab 18.8 and later);
    #: off, the path reaches the single-file route, as on an older GitLab.
    artifacts_tree: bool = True
    #: What the tree's ``recursive=true`` lists: ``all`` entries below ``path`` (GitLab's docs) or
    #: ``children``, one level (GitLab's code: ``Metadata::Entry#children``).
    artifacts_tree_recursive: str = "all"
    #: How the archive download answers: ``range`` (honours ``Range``, as Workhorse does),
    #: ``whole`` (ignores it: a proxy dropping the header), ``redirect`` (302 to object storage).
    artifacts_download: str = "range"


@dataclass
class World:
    """Everything the stand-in knows; rebuilt from :func:`tests.standin.dataset.build_world` on reset."""

    users: dict[int, User]
    groups: dict[int, Group]
    projects: dict[int, Project]
    pipelines: dict[int, Pipeline]
    workflows: dict[int, DuoWorkflow]
    settings: Settings = field(default_factory=Settings)
    next_pipeline_id: int = 3001
    next_job_id: int = 9001
    created_pipeline_ids: list[int] = field(default_factory=list)
    #: Reads of a running job's log so far (its log grows by one line per read).
    trace_reads: dict[int, int] = field(default_factory=dict)
    #: Group full paths each user belongs to (``GET /groups``), by username.
    user_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def retry_job(self, pipeline: Pipeline, job: Job) -> Job:
        """GitLab's ``Ci::RetryJobService``: ``job`` is marked retried and its new run, pending,
        joins ``pipeline``; the new run is returned."""
        job.retried = True
        clone = Job(
            id=self.next_job_id,
            name=job.name,
            stage=job.stage,
            status="PENDING",
            allow_failure=job.allow_failure,
            when=job.when,
            tags=job.tags,
            started_at=None,
            finished_at=None,
            duration=None,
        )
        self.next_job_id += 1
        pipeline.jobs.append(clone)
        return clone

    def user_for_token(self, token: str) -> User | None:
        """The user a token authenticates, or None for an unknown (or revoked) token."""
        for user in self.users.values():
            if token in user.tokens:
                return user
        return None

    def user_named(self, username: str) -> User | None:
        """A user by username."""
        return next((u for u in self.users.values() if u.username == username), None)

    def project_by_path(self, full_path: str) -> Project | None:
        """A project by full path (case-insensitive, as GitLab routes are)."""
        wanted = full_path.lower()
        return next((p for p in self.projects.values() if p.full_path.lower() == wanted), None)

    def project_by_ref(self, ident: str) -> Project | None:
        """A project by numeric id or full path (REST's ``:id``)."""
        if ident.isdigit():
            return self.projects.get(int(ident))
        return self.project_by_path(ident)

    def group_by_path(self, full_path: str) -> Group | None:
        """A group by full path."""
        wanted = full_path.lower()
        return next((g for g in self.groups.values() if g.full_path.lower() == wanted), None)

    def project_pipelines(self, project_id: int) -> list[Pipeline]:
        """A project's pipelines, newest first (GitLab's default order)."""
        return sorted(
            (p for p in self.pipelines.values() if p.project_id == project_id),
            key=lambda p: p.id,
            reverse=True,
        )

    def downstream_of(self, pipeline: Pipeline) -> list[Pipeline]:
        """Pipelines triggered by the bridges of ``pipeline``, in bridge order."""
        ids = [j.downstream_pipeline_id for j in pipeline.jobs if j.downstream_pipeline_id]
        return [self.pipelines[i] for i in ids if i in self.pipelines]
