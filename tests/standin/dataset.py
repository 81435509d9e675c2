"""The stand-in's seed data, and the constants tests use to name it.

Import the constants rather than repeating literals::

    from tests.standin import dataset as ds
    ds.PROJECT_PATH, ds.PROJECT_ID, ds.PIPELINE_ID, ds.FILES["mixed"], ds.ALICE_TOKEN

``tests/standin/README.md`` describes the same data in prose. :func:`build_world` returns a fresh
copy of everything (the control API's reset calls it).
"""

from __future__ import annotations

import hashlib

from tests.standin import content
from tests.standin.models import (
    Access,
    Blob,
    Commit,
    DuoMessage,
    DuoWorkflow,
    Group,
    Job,
    Pipeline,
    Project,
    Repository,
    Tag,
    TestCase,
    User,
    World,
)

# -- users and tokens -----------------------------------------------------------------------------

ALICE_TOKEN = "glpat-standin-alice-developer"
"""Default caller: developer of ``grp/sub/proj``, reporter of ``grp/public-proj``, no access to
``grp/private-proj``."""
BOB_TOKEN = "glpat-standin-bob-maintainer"
"""Maintainer of ``grp/sub/proj`` and ``grp/private-proj``: reads everything."""
CAROL_TOKEN = "glpat-standin-carol-reporter"
"""Reporter of ``grp/sub/proj``: reads it, may not create, retry or cancel pipelines."""
REVOKED_TOKEN = "glpat-standin-revoked"
"""A token GitLab no longer accepts: 401 on every request."""

ALICE_ID, BOB_ID, CAROL_ID = 2, 3, 4

# -- groups and projects --------------------------------------------------------------------------

GROUP_PATH, SUBGROUP_PATH = "grp", "grp/sub"
GROUP_ID, SUBGROUP_ID = 10, 11

PROJECT_PATH = "grp/sub/proj"
PROJECT_ID = 42
PROJECT_PATH_ENCODED = "grp%2Fsub%2Fproj"
PRIVATE_PROJECT_PATH = "grp/private-proj"
PRIVATE_PROJECT_ID = 43
PUBLIC_PROJECT_PATH = "grp/public-proj"
PUBLIC_PROJECT_ID = 44

#: ``duoContextExclusionSettings.exclusionRules`` of ``grp/sub/proj`` (the other projects have none).
EXCLUSION_RULES = ["secrets/**", "*.pem"]

# -- pipelines ------------------------------------------------------------------------------------

PIPELINE_ID = 1001
"""``grp/sub/proj`` pipeline on ``main``, FAILED: 45 build jobs, 2 bridge jobs, 2 downstream pipelines."""
PIPELINE_IID = 12
CHILD_PIPELINE_ID = 1002
"""Child pipeline of 1001 in ``grp/sub/proj`` (source ``parent_pipeline``), FAILED, 2 jobs."""
PRIVATE_PIPELINE_ID = 2001
"""Multi-project downstream of 1001 in ``grp/private-proj`` (source ``pipeline``): alice cannot read it."""
RUNNING_PIPELINE_ID = 1003
"""``grp/sub/proj`` pipeline on ``feature``, RUNNING: cancelable, not retryable."""
TAG_PIPELINE_ID = 1004
"""``grp/sub/proj`` pipeline on tag ``v1.0``, SUCCESS: neither cancelable nor retryable."""
PUBLIC_PIPELINE_ID = 4001
"""``grp/public-proj`` pipeline on ``main``, SUCCESS: readable anonymously."""
FIRST_CREATED_PIPELINE_ID = 3001
"""``pipelineCreate`` hands out 3001, 3002, … after each reset."""

BUILD_JOB_IDS = list(range(5001, 5046))
"""The 45 build jobs of pipeline 1001, ids 5001 to 5045."""
BRIDGE_CHILD_JOB_ID = 5046
"""Bridge ``trigger-child`` (FAILED) → child pipeline 1002."""
BRIDGE_PRIVATE_JOB_ID = 5047
"""Bridge ``trigger-downstream`` (SUCCESS) → pipeline 2001 in the private project."""

STAGES = ["build", "test", "deploy"]
_BUILD_NAMES = (
    ["build:linux", "build:macos", "build:windows"]
    + [f"rspec {i}/30" for i in range(1, 31)]
    + [f"jest {i}/6" for i in range(1, 7)]
    + ["lint", "typecheck", "license-check", "docs-check"]
    + ["review-app", "pages"]
)
_STATUS_OVERRIDES = {
    "rspec 7/30": "FAILED",
    "rspec 21/30": "FAILED",
    "lint": "FAILED",
    "docs-check": "CANCELED",
    "review-app": "MANUAL",
    "pages": "SKIPPED",
}
FAILED_JOB_NAMES = ["rspec 7/30", "rspec 21/30", "lint"]
"""The 3 failed build jobs of pipeline 1001 (``lint`` has ``allowFailure: true``)."""
FAILED_JOB_IDS = [5000 + _BUILD_NAMES.index(n) + 1 for n in FAILED_JOB_NAMES]
"""Their ids: 5010, 5024, 5040."""
FAILING_TEST = {
    "suite": "rspec",
    "name": "User#display_name returns the name with its emoji 🙂",
    "classname": "spec.models.user_spec",
    "file": "./spec/models/user_spec.rb",
    "stack_trace": (
        'Failure/Error: expect(user.display_name).to eq("Zoë 🙂")\n\n'
        '  expected: "Zoë 🙂"\n       got: "Zoe"\n\n  (compared using ==)\n'
        "# ./spec/models/user_spec.rb:42:in `block (3 levels) in <top (required)>'"
    ),
}
"""The failed test case of ``rspec 7/30`` (job 5010, whose log shows the same failure), as GitLab
parses its JUnit report."""
ERROR_TEST = {
    "suite": "rspec",
    "name": "Invoice renders the PDF",
    "classname": "spec.models.invoice_spec",
    "file": "./spec/models/invoice_spec.rb",
    "stack_trace": "NameError: uninitialized constant Invoice::PdfRenderer\n"
    "# ./app/models/invoice.rb:17:in `render'\n# ./spec/models/invoice_spec.rb:9:in `block (2 levels)'",
}
"""The errored test case of ``rspec 21/30`` (job 5024)."""
RSPEC_TESTS_PER_JOB = 7
"""Test cases in each ``rspec N/30`` job's report (as its log says, "7 examples"): the failed or
errored one above, the rest passed."""
BUILD_STATUS_COUNTS = {"SUCCESS": 39, "FAILED": 3, "CANCELED": 1, "MANUAL": 1, "SKIPPED": 1}

# -- repository -----------------------------------------------------------------------------------

DEFAULT_BRANCH = "main"
BRANCHES = ["main", "feature", "feature/other", "my-topic/with-slash", "release", "broken-ci"]
"""Branches of ``grp/sub/proj``. ``feature`` and ``feature/other`` both exist (so in a URL
``feature/other/...`` the first segment is itself a branch); ``my-topic`` is not a branch."""
TAGS = ["v1.0", "release"]
"""Tags of ``grp/sub/proj``; ``release`` is also a branch, with different content."""
BROKEN_CI_BRANCH = "broken-ci"
BROKEN_CI_ERROR = content.BROKEN_CI_ERROR


def _sha(seed: str) -> str:
    return hashlib.sha1(seed.encode(), usedforsecurity=False).hexdigest()


COMMITS = {
    "initial": _sha("grp/sub/proj:initial"),
    "main": _sha("grp/sub/proj:main"),
    "feature": _sha("grp/sub/proj:feature"),
    "feature/other": _sha("grp/sub/proj:feature/other"),
    "my-topic/with-slash": _sha("grp/sub/proj:my-topic/with-slash"),
    "release": _sha("grp/sub/proj:release-branch"),
    "release-tag": _sha("grp/sub/proj:release-tag"),
    "broken-ci": _sha("grp/sub/proj:broken-ci"),
}
"""Full 40-hex commit SHAs: the head of each branch; ``initial`` is tag ``v1.0``; ``release-tag``
is tag ``release``."""
REF_SHAS = {
    "main": COMMITS["main"],
    "feature": COMMITS["feature"],
    "feature/other": COMMITS["feature/other"],
    "my-topic/with-slash": COMMITS["my-topic/with-slash"],
    "release": COMMITS["release"],
    "broken-ci": COMMITS["broken-ci"],
    "v1.0": COMMITS["initial"],
}
"""Branch (or tag ``v1.0``) → commit SHA (``release`` here is the branch; the tag is
``COMMITS["release-tag"]``)."""

FILES = {
    "readme": "README.md",
    "ci": ".gitlab-ci.yml",
    "app": "src/app.py",
    "mixed": "docs/mixed-5000.txt",
    "png": "assets/logo.png",
    "lfs": "assets/model.bin",
    "truncated": "logs/truncated.log",
    "empty": "empty.txt",
    "no_newline": "no-newline.txt",
    "crlf": "crlf.txt",
    "long_line": "dist/app.min.js",
    "ten_mib": "big/10mib.txt",
    "secret": "secrets/api-key.txt",
    "pem": "certs/server.pem",
    "x_rb": "app/x.rb",
}
"""Paths of the files on ``main`` (every branch has them too, apart from the differences below)."""
FEATURE_ONLY_FILE = "with-slash/app/x.rb"
"""Only on branch ``feature``: the documented URL ``.../-/blob/feature/with-slash/app/x.rb`` reads it."""

README_MAIN = "# proj\n\nThe stand-in's sample project (branch main).\n"
README_V1 = "# proj\n\nVersion 1.0.\n"
README_FEATURE = "# proj\n\nBranch feature.\n"
README_RELEASE_BRANCH = "# proj\n\nBranch release.\n"
README_RELEASE_TAG = "# proj\n\nTag release.\n"
APP_PY = 'def main() -> None:\n    print("hello")\n\n\nif __name__ == "__main__":\n    main()\n'
SECRET_TEXT = "API_KEY=not-a-real-key\n"
PEM_TEXT = "-----BEGIN CERTIFICATE-----\nMIIBstandin\n-----END CERTIFICATE-----\n"


def x_rb(branch: str) -> str:
    """Content of ``app/x.rb`` (or ``with-slash/app/x.rb`` on ``feature``) per branch."""
    return f"# branch: {branch}\nputs 'x'\n"


# -- Duo workflows --------------------------------------------------------------------------------

WORKFLOWS = {
    "running": 501,
    "finished": 502,
    "input_required": 503,
    "tool_call_approval_required": 504,
    "plan_approval_required": 505,
    "paused": 506,
    "failed": 507,
    "stopped": 508,
    "created": 509,
    "finished_no_answer": 510,
    "finished_last_is_tool": 511,
    "private": 520,
}
"""Workflow ids by state. All belong to alice in ``grp/sub/proj`` except ``private`` (520, bob's, in
``grp/private-proj``: alice gets "not found")."""
FINAL_ANSWER = (
    "The pipeline failed because rspec 7/30 and rspec 21/30 hit a flaky database fixture. I fixed it in !17."
)
CHAT_ANSWER = "`Project#archive!` archives the project and its repository. Anything else?"
LAST_AGENT_ANSWER_511 = "All three failures come from the same missing environment variable, DATABASE_URL."
LONG_PROGRESS = (
    "Investigating the failing jobs. " + "Reading job logs and comparing them with the last green run. " * 12
)
"""The running workflow's latest agent message: 764 characters (more than 500)."""


def _tree_main() -> dict[str, Blob]:
    return {
        FILES["readme"]: Blob.of(README_MAIN),
        FILES["ci"]: Blob.of(content.CI_CONFIG),
        FILES["app"]: Blob.of(APP_PY),
        FILES["mixed"]: Blob(loader=content.mixed_text),
        FILES["png"]: Blob(loader=content.png_bytes),
        FILES["lfs"]: Blob(
            loader=content.lfs_pointer, lfs_size=content.LFS_OBJECT_SIZE, lfs_oid=content.LFS_OID
        ),
        FILES["truncated"]: Blob(loader=content.truncated_part, full_size=content.TRUNCATED_FULL_SIZE),
        FILES["empty"]: Blob.of(b""),
        FILES["no_newline"]: Blob.of(content.NO_NEWLINE_TEXT),
        FILES["crlf"]: Blob.of(content.CRLF_TEXT),
        FILES["long_line"]: Blob(loader=content.one_long_line),
        FILES["ten_mib"]: Blob(loader=content.ten_mib_text),
        FILES["secret"]: Blob.of(SECRET_TEXT),
        FILES["pem"]: Blob.of(PEM_TEXT),
        FILES["x_rb"]: Blob.of(x_rb("main")),
    }


def _project_repository() -> Repository:
    repo = Repository(default_branch=DEFAULT_BRANCH, protected_branches={"main"})
    main_tree = _tree_main()

    def add(key: str, title: str, tree: dict[str, Blob], parent: str | None) -> str:
        sha = COMMITS[key]
        repo.commits[sha] = Commit(sha=sha, title=title, message=title + "\n", tree=tree, parent_sha=parent)
        return sha

    initial = add(
        "initial",
        "Initial commit",
        {
            FILES["readme"]: Blob.of(README_V1),
            FILES["ci"]: Blob.of(content.CI_CONFIG),
            FILES["app"]: Blob.of(APP_PY),
        },
        None,
    )
    main = add("main", "Add sample files", main_tree, initial)
    feature_tree = {
        **main_tree,
        FILES["readme"]: Blob.of(README_FEATURE),
        FEATURE_ONLY_FILE: Blob.of(x_rb("feature, path with-slash/app/x.rb")),
    }
    add("feature", "Work on feature", feature_tree, main)
    add("feature/other", "Other feature", {**main_tree, FILES["x_rb"]: Blob.of(x_rb("feature/other"))}, main)
    add(
        "my-topic/with-slash",
        "Topic with a slash",
        {**main_tree, FILES["x_rb"]: Blob.of(x_rb("my-topic/with-slash"))},
        main,
    )
    add("release", "Release branch", {**main_tree, FILES["readme"]: Blob.of(README_RELEASE_BRANCH)}, main)
    add("release-tag", "Release tag", {**main_tree, FILES["readme"]: Blob.of(README_RELEASE_TAG)}, main)
    add(
        "broken-ci",
        "Break the CI configuration",
        {**main_tree, FILES["ci"]: Blob.of(content.BROKEN_CI_CONFIG)},
        main,
    )
    for branch in BRANCHES:
        repo.branches[branch] = COMMITS[branch]
    repo.tags["v1.0"] = Tag("v1.0", COMMITS["initial"], "Version 1.0", "2026-01-01T12:00:00Z")
    repo.tags["release"] = Tag("release", COMMITS["release-tag"], "Release", "2026-01-12T12:00:00Z")
    return repo


def _simple_repository(project: str) -> Repository:
    sha = _sha(f"{project}:main")
    repo = Repository(default_branch="main")
    repo.commits[sha] = Commit(
        sha=sha,
        title="Initial commit",
        message="Initial commit\n",
        tree={"README.md": Blob.of(f"# {project}\n"), ".gitlab-ci.yml": Blob.of(content.CI_CONFIG)},
    )
    repo.branches["main"] = sha
    return repo


def _rspec_report(index: int, name: str) -> list[TestCase]:
    """A JUnit report of one ``rspec N/30`` job: passed cases, plus the failing one of 7/30 and
    the errored one of 21/30."""
    cases = [
        TestCase(
            name=f"Spec {index}.{n} passes",
            classname=f"spec.models.part{index}_spec",
            file=f"./spec/models/part{index}_spec.rb",
        )
        for n in range(RSPEC_TESTS_PER_JOB)
    ]
    special = {"rspec 7/30": (FAILING_TEST, "failed"), "rspec 21/30": (ERROR_TEST, "error")}.get(name)
    if special is not None:
        test, status = special
        cases[-1] = TestCase(
            name=test["name"],
            classname=test["classname"],
            file=test["file"],
            status=status,
            stack_trace=test["stack_trace"],
            execution_time=1.25,
        )
    return cases


def _main_pipeline() -> Pipeline:
    jobs: list[Job] = []
    for i, name in enumerate(_BUILD_NAMES):
        stage = (
            "build" if name.startswith("build:") else "deploy" if name in ("review-app", "pages") else "test"
        )
        status = _STATUS_OVERRIDES.get(name, "SUCCESS")
        job = Job(id=5001 + i, name=name, stage=stage, status=status, allow_failure=name == "lint")
        if status == "FAILED":
            job.failure_reason = "script_failure"
        if name.startswith("rspec "):
            job.test_cases = _rspec_report(i, name)
        if status in ("MANUAL", "SKIPPED"):
            job.started_at = job.finished_at = None
            job.duration = None
            job.when = "manual" if status == "MANUAL" else "on_success"
        jobs.append(job)
    jobs.append(
        Job(
            id=BRIDGE_CHILD_JOB_ID,
            name="trigger-child",
            stage="deploy",
            status="FAILED",
            kind="BRIDGE",
            downstream_pipeline_id=CHILD_PIPELINE_ID,
            tags=(),
        )
    )
    jobs.append(
        Job(
            id=BRIDGE_PRIVATE_JOB_ID,
            name="trigger-downstream",
            stage="deploy",
            status="SUCCESS",
            kind="BRIDGE",
            downstream_pipeline_id=PRIVATE_PIPELINE_ID,
            tags=(),
        )
    )
    return Pipeline(
        id=PIPELINE_ID,
        iid=PIPELINE_IID,
        project_id=PROJECT_ID,
        ref="main",
        sha=COMMITS["main"],
        status="FAILED",
        source="push",
        jobs=jobs,
        stages=list(STAGES),
        name="Nightly build",
    )


def build_world() -> World:
    """A fresh copy of the whole seed data (users, projects, pipelines, workflows)."""
    users = {
        ALICE_ID: User(ALICE_ID, "alice", "Alice Developer", (ALICE_TOKEN,)),
        BOB_ID: User(BOB_ID, "bob", "Bob Maintainer", (BOB_TOKEN,)),
        CAROL_ID: User(CAROL_ID, "carol", "Carol Reporter", (CAROL_TOKEN,)),
    }
    groups = {
        GROUP_ID: Group(GROUP_ID, GROUP_PATH, "grp"),
        SUBGROUP_ID: Group(SUBGROUP_ID, SUBGROUP_PATH, "sub"),
    }
    projects = {
        PROJECT_ID: Project(
            id=PROJECT_ID,
            full_path=PROJECT_PATH,
            name="proj",
            description="The stand-in's sample project.",
            visibility="private",
            members={"alice": Access.DEVELOPER, "bob": Access.MAINTAINER, "carol": Access.REPORTER},
            repository=_project_repository(),
            exclusion_rules=list(EXCLUSION_RULES),
        ),
        PRIVATE_PROJECT_ID: Project(
            id=PRIVATE_PROJECT_ID,
            full_path=PRIVATE_PROJECT_PATH,
            name="private-proj",
            description="Only bob can read this project.",
            visibility="private",
            members={"bob": Access.MAINTAINER},
            repository=_simple_repository(PRIVATE_PROJECT_PATH),
        ),
        PUBLIC_PROJECT_ID: Project(
            id=PUBLIC_PROJECT_ID,
            full_path=PUBLIC_PROJECT_PATH,
            name="public-proj",
            description="Anyone can read this project.",
            visibility="public",
            members={"alice": Access.REPORTER, "bob": Access.MAINTAINER},
            repository=_simple_repository(PUBLIC_PROJECT_PATH),
            duo_features_enabled=False,
        ),
    }
    private_sha = projects[PRIVATE_PROJECT_ID].repository.branches["main"]
    public_sha = projects[PUBLIC_PROJECT_ID].repository.branches["main"]
    pipelines = {
        PIPELINE_ID: _main_pipeline(),
        CHILD_PIPELINE_ID: Pipeline(
            id=CHILD_PIPELINE_ID,
            iid=13,
            project_id=PROJECT_ID,
            ref="main",
            sha=COMMITS["main"],
            status="FAILED",
            source="parent_pipeline",
            upstream_id=PIPELINE_ID,
            stages=["test"],
            config_source="BRIDGE_SOURCE",
            jobs=[
                Job(5101, "child:rspec", "test", "FAILED", failure_reason="script_failure"),
                Job(5102, "child:lint", "test", "SUCCESS"),
            ],
        ),
        PRIVATE_PIPELINE_ID: Pipeline(
            id=PRIVATE_PIPELINE_ID,
            iid=1,
            project_id=PRIVATE_PROJECT_ID,
            ref="main",
            sha=private_sha,
            status="SUCCESS",
            source="pipeline",
            upstream_id=PIPELINE_ID,
            stages=["deploy"],
            user="bob",
            jobs=[Job(6001, "deploy-private", "deploy", "SUCCESS")],
        ),
        RUNNING_PIPELINE_ID: Pipeline(
            id=RUNNING_PIPELINE_ID,
            iid=14,
            project_id=PROJECT_ID,
            ref="feature",
            sha=COMMITS["feature"],
            status="RUNNING",
            source="push",
            stages=["build", "test"],
            finished_at=None,
            duration=None,
            jobs=[
                Job(5201, "build", "build", "SUCCESS"),
                Job(5202, "rspec", "test", "RUNNING", finished_at=None, duration=None),
                Job(5203, "jest", "test", "PENDING", started_at=None, finished_at=None, duration=None),
            ],
        ),
        TAG_PIPELINE_ID: Pipeline(
            id=TAG_PIPELINE_ID,
            iid=11,
            project_id=PROJECT_ID,
            ref="v1.0",
            sha=COMMITS["initial"],
            tag=True,
            status="SUCCESS",
            source="push",
            stages=["build"],
            created_at="2026-01-01T12:00:00Z",
            jobs=[Job(5301, "build", "build", "SUCCESS")],
        ),
        PUBLIC_PIPELINE_ID: Pipeline(
            id=PUBLIC_PIPELINE_ID,
            iid=1,
            project_id=PUBLIC_PROJECT_ID,
            ref="main",
            sha=public_sha,
            status="SUCCESS",
            source="push",
            stages=["test"],
            user="bob",
            jobs=[Job(4101, "test", "test", "SUCCESS")],
        ),
    }
    return World(
        users=users,
        groups=groups,
        projects=projects,
        pipelines=pipelines,
        workflows=_workflows(),
        next_pipeline_id=FIRST_CREATED_PIPELINE_ID,
    )


def _msg(kind: str, text: str, role: str | None = None, **kw: object) -> DuoMessage:
    return DuoMessage(content=text, message_type=kind, role=role, **kw)  # type: ignore[arg-type]


def _workflows() -> dict[int, DuoWorkflow]:
    goal = "Find out why pipeline 1001 failed and fix it"
    user_goal = _msg("user", goal, "user")
    tool = _msg(
        "tool",
        'Using get_pipeline: {"pipeline_id": 1001, "include": ["jobs"]}',
        "tool",
        tool_info='{"name": "get_pipeline", "args": {"pipeline_id": 1001}}',
    )
    wf = {
        "running": DuoWorkflow(
            WORKFLOWS["running"],
            PROJECT_ID,
            "alice",
            "RUNNING",
            goal,
            messages=[user_goal, tool, _msg("agent", LONG_PROGRESS)],
        ),
        "finished": DuoWorkflow(
            WORKFLOWS["finished"],
            PROJECT_ID,
            "alice",
            "FINISHED",
            goal,
            messages=[
                user_goal,
                _msg("agent", "Looking at the failed jobs."),
                tool,
                _msg("agent", FINAL_ANSWER),
            ],
        ),
        "input_required": DuoWorkflow(
            WORKFLOWS["input_required"],
            PROJECT_ID,
            "alice",
            "INPUT_REQUIRED",
            "What does Project#archive! do?",
            workflow_definition="chat",
            environment="CHAT",
            messages=[
                _msg("user", "What does Project#archive! do?", "user"),
                _msg("agent", CHAT_ANSWER, "assistant"),
            ],
        ),
        "tool_call_approval_required": DuoWorkflow(
            WORKFLOWS["tool_call_approval_required"],
            PROJECT_ID,
            "alice",
            "TOOL_CALL_APPROVAL_REQUIRED",
            goal,
            messages=[
                user_goal,
                _msg("agent", "I want to push a fix to a new branch."),
                _msg(
                    "request",
                    "Run `git push origin fix-flaky-fixture`?",
                    tool_info='{"name": "run_git_command", "args": {"command": "push"}}',
                ),
            ],
        ),
        "plan_approval_required": DuoWorkflow(
            WORKFLOWS["plan_approval_required"],
            PROJECT_ID,
            "alice",
            "PLAN_APPROVAL_REQUIRED",
            goal,
            messages=[
                user_goal,
                _msg("agent", "Plan: 1. read the failed job logs 2. fix the fixture 3. open an MR."),
            ],
        ),
        "paused": DuoWorkflow(
            WORKFLOWS["paused"],
            PROJECT_ID,
            "alice",
            "PAUSED",
            goal,
            messages=[user_goal, _msg("agent", "Pausing as requested.")],
        ),
        "failed": DuoWorkflow(
            WORKFLOWS["failed"],
            PROJECT_ID,
            "alice",
            "FAILED",
            goal,
            messages=[user_goal, _msg("agent", "I could not read the job logs.", status="failure")],
            checkpoint_errors=["Tool get_job_log failed: 403 Forbidden"],
        ),
        "stopped": DuoWorkflow(
            WORKFLOWS["stopped"],
            PROJECT_ID,
            "alice",
            "STOPPED",
            goal,
            messages=[user_goal, _msg("agent", "Started reading the pipeline.")],
        ),
        "created": DuoWorkflow(WORKFLOWS["created"], PROJECT_ID, "alice", "CREATED", goal, messages=[]),
        "finished_no_answer": DuoWorkflow(
            WORKFLOWS["finished_no_answer"], PROJECT_ID, "alice", "FINISHED", goal, messages=[user_goal, tool]
        ),
        "finished_last_is_tool": DuoWorkflow(
            WORKFLOWS["finished_last_is_tool"],
            PROJECT_ID,
            "alice",
            "FINISHED",
            goal,
            messages=[
                user_goal,
                _msg("agent", LAST_AGENT_ANSWER_511, "assistant"),
                _msg("tool", "Ran: env | grep DATABASE_URL (no output)", "tool"),
                _msg("user", "thanks", "user"),
            ],
        ),
        "private": DuoWorkflow(
            WORKFLOWS["private"],
            PRIVATE_PROJECT_ID,
            "bob",
            "FINISHED",
            "Deploy the private app",
            messages=[_msg("agent", "Deployed.")],
        ),
    }
    return {w.id: w for w in wf.values()}
