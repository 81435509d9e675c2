"""Job logs and artifacts of the stand-in: ``GET /projects/:id/jobs/:job_id``, ``.../trace`` and
``.../artifacts/*artifact_path`` (https://docs.gitlab.com/api/jobs/,
https://docs.gitlab.com/api/job_artifacts/).

Logs are written as GitLab Runner writes them (https://docs.gitlab.com/ci/jobs/job_logs/): SGR
colours, ``\\e[0K``, ``\\r`` progress redraws, collapsible sections (collapsed and not), multi-byte
characters. Which job has which:

- :data:`FAILED_LOG_JOB_ID` (``rspec 7/30``, failed): a full runner log whose ``step_script``
  fails; no test report. :data:`FAILED_LOG` is its raw text.
- :data:`HUGE_LOG_JOB_ID` (``build:linux``): :data:`HUGE_LOG_BYTES` of log generated as it is
  sent (never held), with ``Content-Length``; :data:`BENCH_LOG_JOB_ID` (``build:macos``): the same
  at :data:`BENCH_LOG_BYTES`, for ``python -m bench``.
- :data:`RUNNING_LOG_JOB_ID` (``rspec``, running): every read of its log finds one more progress
  line, and the log ends with the unfinished line being written; sent without ``Content-Length``.
- :data:`RESTRICTED_LOG_JOB_ID` (``rspec 22/30``): its log is for Developers and up (carol, a
  Reporter, gets 403 on ``/trace`` while she reads the job).
- :data:`ARTIFACTS_JOB_ID` (``rspec 21/30``): an archive with :data:`ARTIFACT_FILES` (text,
  multi-byte text, binary). :data:`EXPIRED_ARTIFACTS_JOB_ID` (``lint``): its artifacts expired.
- Every other build job has a short log.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.standin.models import Access, Job, Pipeline
from tests.standin.rest_api import RestOutcome, RestRequest, _project, job_entity, not_found, route

E = "\x1b"
FAILED_LOG_JOB_ID = 5010
HUGE_LOG_JOB_ID = 5001
BENCH_LOG_JOB_ID = 5002
RUNNING_LOG_JOB_ID = 5202
RESTRICTED_LOG_JOB_ID = 5025
ARTIFACTS_JOB_ID = 5024
EXPIRED_ARTIFACTS_JOB_ID = 5040
HUGE_LOG_BYTES = 200 * 1024 * 1024
BENCH_LOG_BYTES = 10 * 1024 * 1024


def _section(name: str, ts: int, header: str, *, collapsed: bool = False) -> str:
    option = "[collapsed=true]" if collapsed else ""
    return f"section_start:{ts}:{name}{option}\r{E}[0K{E}[0K{E}[36;1m{header}{E}[0;m\n"


def _end(name: str, ts: int) -> str:
    return f"section_end:{ts}:{name}\r{E}[0K"


def runner_log(script: list[str], *, failed: bool, start: int = 1768467660) -> str:
    """A runner's log around ``script`` (already-marked-up lines), failing or not."""
    t = start
    out = [
        f"{E}[0KRunning with gitlab-runner 17.5.0 (8ec04662){E}[0;m\n",
        f"{E}[0K  on docker-runner-1 xyz123, system ID: s_0123456789ab{E}[0;m\n",
        _section("prepare_executor", t, 'Preparing the "docker" executor'),
        f"{E}[0KUsing Docker executor with image ruby:3.3 ...{E}[0;m\n",
        f"{E}[0KPulling docker image ruby:3.3 ...{E}[0;m\n",
        _end("prepare_executor", t + 12),
        _section("get_sources", t + 12, "Getting source from Git repository", collapsed=True),
        f"{E}[32;1mFetching changes with git depth set to 20...{E}[0;m\n",
        "Receiving objects:  12% (120/1000)\rReceiving objects:  57% (570/1000)\r"
        "Receiving objects: 100% (1000/1000), 1.21 MiB | 3.40 MiB/s, done.\n",
        "Resolving deltas:  40% (4/10)\rResolving deltas: 100% (10/10), done.\n",
        _end("get_sources", t + 15),
        _section("step_script", t + 15, 'Executing "step_script" stage of the job script'),
        *script,
        _end("step_script", t + 75),
    ]
    t += 75
    if failed:
        out += [
            _section("upload_artifacts_on_failure", t, "Uploading artifacts for failed job", collapsed=True),
            f"{E}[32;1mUploading artifacts...{E}[0;m\n",
            f"{E}[0;33mWARNING: tmp/screenshots: no matching files{E}[0;m\n",
            _end("upload_artifacts_on_failure", t + 2),
            _section(
                "cleanup_file_variables", t + 2, "Cleaning up project directory and file based variables"
            ),
            _end("cleanup_file_variables", t + 3),
            f"{E}[31;1mERROR: Job failed: exit code 1\n{E}[0;m\n",
        ]
    else:
        out += [
            _section("cleanup_file_variables", t, "Cleaning up project directory and file based variables"),
            _end("cleanup_file_variables", t + 1),
            f"{E}[32;1mJob succeeded{E}[0;m\n",
        ]
    return "".join(out)


FAILED_LOG = runner_log(
    [
        f"{E}[32;1m$ bundle exec rspec spec/models{E}[0;m\n",
        _section("rspec", 1768467700, "Running specs (grüße, 日本語 ✓)", collapsed=True),
        "Randomized with seed 4242\n",
        "....F..\n",
        _end("rspec", 1768467730),
        "\n",
        "Failures:\n",
        "\n",
        "  1) User#display_name returns the name with its emoji 🙂\n",
        f'     {E}[31mFailure/Error: expect(user.display_name).to eq("Zoë 🙂"){E}[0m\n',
        f'       {E}[31mexpected: "Zoë 🙂"{E}[0m\n',
        f'       {E}[31m     got: "Zoe"{E}[0m\n',
        f"     {E}[36m# ./spec/models/user_spec.rb:42:in `block (3 levels) in <top (required)>'{E}[0m\n",
        "\n",
        "Finished in 1.52 seconds (files took 2.1 seconds to load)\n",
        f"{E}[31m7 examples, 1 failure{E}[0m\n",
        "\n",
        "Failed examples:\n",
        "\n",
        f"{E}[31mrspec ./spec/models/user_spec.rb:40{E}[0m "
        f"{E}[36m# User#display_name returns the name{E}[0m\n",
    ],
    failed=True,
)


def _short_log(job: Job) -> str:
    failed = job.status == "FAILED"
    return runner_log(
        [
            f"{E}[32;1m$ make {job.name.split()[0]}{E}[0;m\n",
            "done\n" if not failed else "make: *** Error 2\n",
        ],
        failed=failed,
    )


# -- the large, lazily generated logs --------------------------------------------------------------

_HUGE_HEAD = (
    f"{E}[0KRunning with gitlab-runner 17.5.0 (8ec04662){E}[0;m\n"
    + _section("step_script", 1768467660, 'Executing "step_script" stage of the job script')
).encode()
_HUGE_TAIL = (_end("step_script", 1768467960) + f"{E}[32;1mJob succeeded{E}[0;m\n").encode()
#: One block of lines: its first line carries the block's number (fixed width), the rest repeat.
_BLOCK_LINES = 1000
_FILLER = f"{E}[32m[compile]{E}[0m src/module_{{0}}.c → build/module_{{0}}.o ✓\n"


def _block(n: int) -> bytes:
    first = f"{E}[1mblock {n:08d}{E}[0m compiling\n"
    body = _FILLER.format("x" * 8) * (_BLOCK_LINES - 1)
    return (first + body).encode()


_BLOCK_SIZE = len(_block(0))


def lazy_log_size(total: int) -> int:
    """The exact size of :func:`lazy_log` for a target of ``total`` bytes."""
    blocks = max(1, (total - len(_HUGE_HEAD) - len(_HUGE_TAIL)) // _BLOCK_SIZE)
    return len(_HUGE_HEAD) + blocks * _BLOCK_SIZE + len(_HUGE_TAIL)


def lazy_log(total: int) -> Iterator[bytes]:
    """About ``total`` bytes of log (exactly :func:`lazy_log_size`), made as it is sent."""
    blocks = max(1, (total - len(_HUGE_HEAD) - len(_HUGE_TAIL)) // _BLOCK_SIZE)
    yield _HUGE_HEAD
    body = _FILLER.format("x" * 8) * (_BLOCK_LINES - 1)
    encoded_body = body.encode()
    for n in range(blocks):
        yield f"{E}[1mblock {n:08d}{E}[0m compiling\n".encode() + encoded_body
    yield _HUGE_TAIL


def lazy_log_last_block(total: int) -> int:
    """The number of the last block line in :func:`lazy_log` (tests look for it in a tail)."""
    return max(1, (total - len(_HUGE_HEAD) - len(_HUGE_TAIL)) // _BLOCK_SIZE) - 1


# -- artifacts -------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
ARTIFACT_FILES: dict[str, bytes] = {
    "coverage/index.html": b"<html><body><h1>Coverage 87.5%</h1></body></html>\n",
    "log/test.log": ("".join(f"{i:04d} grüße 日本語 ✓ test output\n" for i in range(400))).encode(),
    "screenshots/failure.png": PNG,
    "logs/integration.log": "".join(
        f"2026-01-15T09:0{i % 10}:00Z integration step {i:03d}: {'FAILED' if i % 17 == 0 else 'ok'}\n"
        for i in range(120)
    ).encode(),
    "reports/summary.txt": b"integration: 8 failed, 112 passed\n",
    # A large binary file, so that the archive is far larger than the end a listing reads.
    "bin/app.bin": bytes(range(256)) * 8192,
}
ARTIFACTS_EXPIRE_AT = "2099-01-01T00:00:00.000Z"
EXPIRED_AT = "2026-01-20T00:00:00.000Z"


def _artifacts(job: Job) -> tuple[list[dict[str, Any]], str | None]:
    # Ci::JobArtifact stores a trace as file_format `raw` (https://docs.gitlab.com/api/jobs/).
    trace = {"file_type": "trace", "size": 2048, "filename": "job.log", "file_format": "raw"}
    if job.id == ARTIFACTS_JOB_ID:
        return [
            {"file_type": "archive", "size": 40960, "filename": "artifacts.zip", "file_format": "zip"},
            {"file_type": "metadata", "size": 512, "filename": "metadata.gz", "file_format": "gzip"},
            trace,
        ], ARTIFACTS_EXPIRE_AT
    if job.id == EXPIRED_ARTIFACTS_JOB_ID:
        return [trace], EXPIRED_AT  # GitLab deletes an expired archive
    return ([trace] if job.started_at else []), None


# -- routes ----------------------------------------------------------------------------------------


def _job(req: RestRequest, params: dict[str, str]) -> tuple[RestOutcome | None, Pipeline | None, Job | None]:
    p = _project(req, params["id"])
    if p is None:
        return not_found("Project Not Found"), None, None
    jid = params["job_id"]
    if jid.isdigit():
        for pl in req.world.pipelines.values():
            if pl.project_id != p.id:
                continue
            for j in pl.jobs:
                if j.id == int(jid) and j.kind == "BUILD":
                    return None, pl, j
    return not_found("Not found"), None, None


@route("GET", "/projects/:id/jobs/:job_id")
def _get_job(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    error, pl, job = _job(req, params)
    if error or pl is None or job is None:
        return error or not_found()
    entity = job_entity(req, pl, job)
    entity["artifacts"], entity["artifacts_expire_at"] = _artifacts(job)
    archive = next((a for a in entity["artifacts"] if a["file_type"] == "archive"), None)
    entity["artifacts_file"] = {"filename": archive["filename"], "size": archive["size"]} if archive else None
    return RestOutcome(200, entity)


def log_bytes(req: RestRequest, job: Job) -> bytes:
    """The log of a job that is small enough to be held (all but the lazy ones)."""
    if job.id == FAILED_LOG_JOB_ID:
        return FAILED_LOG.encode()
    if job.id == RUNNING_LOG_JOB_ID:
        reads = req.world.trace_reads.get(job.id, 0) + 1
        req.world.trace_reads[job.id] = reads
        head = f"{E}[0KRunning with gitlab-runner 17.5.0 (8ec04662){E}[0;m\n" + _section(
            "step_script", 1768467675, 'Executing "step_script" stage of the job script'
        )
        lines = "".join(f"spec {i:03d} passed ✓\n" for i in range(reads))
        return (head + lines + f"spec {reads:03d} runn").encode()  # the line being written
    return _short_log(job).encode()


@route("GET", "/projects/:id/jobs/:job_id/trace")
def _get_trace(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    error, pl, job = _job(req, params)
    if error or pl is None or job is None:
        return error or not_found()
    project = req.world.projects[pl.project_id]
    if job.id == RESTRICTED_LOG_JOB_ID and project.access(req.user) < Access.DEVELOPER:
        return RestOutcome(403, {"message": "403 Forbidden"})
    plain = "text/plain; charset=utf-8"
    if job.id in (HUGE_LOG_JOB_ID, BENCH_LOG_JOB_ID):
        total = HUGE_LOG_BYTES if job.id == HUGE_LOG_JOB_ID else BENCH_LOG_BYTES
        return RestOutcome(
            200,
            stream=lazy_log(total),
            content_type=plain,
            headers={"Content-Length": str(lazy_log_size(total))},
        )
    data = log_bytes(req, job)
    if job.id == RUNNING_LOG_JOB_ID:  # a live log: chunked, no Content-Length
        return RestOutcome(200, stream=iter([data]), content_type=plain)
    return RestOutcome(200, raw=data, content_type=plain)


@route("GET", "/projects/:id/jobs/:job_id/artifacts/*artifact_path")
def _get_artifact_file(req: RestRequest, params: dict[str, str]) -> RestOutcome:
    error, _pl, job = _job(req, params)
    if error or job is None:
        return error or not_found()
    if job.id != ARTIFACTS_JOB_ID:
        return not_found()  # no archive (none kept, or expired and deleted)
    data = ARTIFACT_FILES.get(params["artifact_path"])
    if data is None:
        return not_found("Not Found")
    content_type = "image/png" if data.startswith(b"\x89PNG") else "text/plain; charset=utf-8"
    return RestOutcome(200, raw=data, content_type=content_type)
