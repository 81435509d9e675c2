"""``get_pipeline``'s ``failures`` facet: what failed in a pipeline, and why, in one call.

For one page of the pipeline's failed build jobs (not retried; ``allow_failure`` jobs included and
marked): GitLab's failure message and exit code, the last lines of the failing section of each job's
log (cleaned as GitLab's job page shows it), and the failed test cases GitLab parsed from the jobs'
JUnit reports (https://docs.gitlab.com/ci/testing/unit_test_reports/), with bounded stack traces.

Requests, at most: the ``getPipeline`` query (failed jobs and the test report summary), one
``getPipelineTestCases`` query for the suites with failures among this page's jobs (skipped when
there are none), and one ``GET /projects/:id/jobs/:job_id/trace`` per job shown, streamed: the
log runs through the cleaner and only its last :data:`READ_TAIL_LINES` lines are held
(``gateway.tools.ci.log_reads.read_tail``). A log GitLab refuses (403: the token may read the
pipeline but not job logs) or fails to send leaves the job listed, with ``log_error`` saying why.

Every part is bounded (the constants below), and the whole answer is kept under
:data:`MAX_ANSWER_CHARS` characters of JSON by shortening the longest texts first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic import ConfigDict, Field

from gateway.gitlab.client import GitLabSession
from gateway.gitlab.errors import GitLabError, GitLabNotFound, GitLabUnauthorized
from gateway.gitlab.job_log import failing_section
from gateway.gitlab.operation import ByPathOrId, GraphQLData, Operation
from gateway.gitlab.urls import encode_project
from gateway.tools.ci.log_reads import read_tail
from gateway.tools.ci.pipeline_address import PIPELINE_BY_ID, IidOf
from gateway.tools.registry import ToolOutput

#: Failed jobs per page of the facet (each costs a log read); a larger ``first`` is lowered to it.
MAX_FAILURES_PAGE = 10
#: Lines of a log's tail held while it streams, to find where its failing section ends.
READ_TAIL_LINES = 400
#: Lines of the failing section returned per job, and characters at most (the end is kept).
LOG_TAIL_LINES = 25
MAX_LOG_CHARS = 3000
#: Test suites whose failed cases are read (aliases in ``get_pipeline_test_cases.graphql``).
MAX_TEST_SUITES = 10
#: Failed test cases returned per suite, and in all.
MAX_TESTS_PER_SUITE = 5
MAX_FAILED_TESTS = 15
#: Characters of a stack trace returned (its start: the assertion and the first frames).
MAX_STACK_TRACE_CHARS = 1200
#: Logs read at the same time.
LOG_READ_CONCURRENCY = 4
#: The answer's JSON stays under this many characters.
MAX_ANSWER_CHARS = 64_000

CUT_MARK = "…"

TRACE_ROUTE = "/projects/{id}/jobs/{job_id}/trace"

# -- GitLab's answers ---------------------------------------------------------------------------------


class SuiteSummaryNode(GraphQLData):
    name: str | None = None
    buildIds: list[str] | None = None
    failedCount: int | None = None
    errorCount: int | None = None
    suiteError: str | None = None


class SuiteSummaries(GraphQLData):
    nodes: list[SuiteSummaryNode | None] | None = None


class ReportTotal(GraphQLData):
    count: int | None = None
    failed: int | None = None
    error: int | None = None
    suiteError: str | None = None


class ReportSummaryNode(GraphQLData):
    total: ReportTotal | None = None
    testSuites: SuiteSummaries | None = None


class CaseNode(GraphQLData):
    name: str | None = None
    classname: str | None = None
    file: str | None = None
    status: str | None = None
    stackTrace: str | None = None


class CaseNodes(GraphQLData):
    nodes: list[CaseNode | None] | None = None


class SuiteNode(GraphQLData):
    name: str | None = None
    failedCount: int | None = None
    errorCount: int | None = None
    suiteError: str | None = None
    testCases: CaseNodes | None = None


class CasesPipeline(GraphQLData):
    model_config = GraphQLData.model_config | {"extra": "allow"}  # suite0..suite9

    def suite(self, index: int) -> SuiteNode | None:
        raw = (self.model_extra or {}).get(f"suite{index}")
        return SuiteNode.model_validate(raw) if raw is not None else None


class CasesProject(GraphQLData):
    pipeline: CasesPipeline | None = None


class GetPipelineTestCasesAnswer(ByPathOrId[CasesProject]):
    """``data`` of ``getPipelineTestCases``."""


GET_PIPELINE_TEST_CASES = Operation(
    "get_pipeline_test_cases", GetPipelineTestCasesAnswer, needs=(PIPELINE_BY_ID,)
)

# -- the facet's results --------------------------------------------------------------------------------


class _Out(ToolOutput):
    # The published outputSchema lists every key a result may carry, and nothing else.
    model_config = ConfigDict(extra="forbid")


class FailureLog(_Out):
    """The last lines of the failing section of a job's log."""

    section: str | None = Field(
        description="The log section they come from (e.g. `step_script`); null when the log has none."
    )
    first_line: int = Field(description="Number of the first line shown, in the cleaned log.")
    last_line: int = Field(description="Number of the last line shown.")
    total_lines: int | None = Field(description="Lines in the whole cleaned log.")
    total_bytes: int | None = Field(description="Size of the raw log in bytes.")
    text: str = Field(description="The lines, ANSI colours, `\\r` progress and section markers resolved.")
    truncated: bool = Field(description="True when the lines were cut to keep the answer small.")


class PipelineFailure(_Out):
    """A failed build job, and why."""

    id: int
    name: str | None
    status: str | None = Field(description="Lowercase CiJobStatus: `failed`.")
    stage: str | None
    allow_failure: bool = Field(description="True when the job may fail without failing the pipeline.")
    web_url: str | None
    failure_message: str | None = Field(
        description="GitLab's reason, e.g. `The script failed with exit code 1`."
    )
    exit_code: int | None = Field(
        description="The job's exit code; filled from GitLab 17.9 on (null on older GitLab, and when the "
        "job did not run a script)."
    )
    test_suite: str | None = Field(
        description="The test suite its JUnit report belongs to (see failed_tests); null when it has none."
    )
    log: FailureLog | None = Field(description="The end of its failing log section; null when not read.")
    log_error: str | None = Field(description="Why `log` is null (GitLab refused or failed the read).")


class FailedTest(_Out):
    """A failed or errored test case from the pipeline's test report."""

    suite: str | None = Field(description="The test suite (jobs of one `parallel` group share one).")
    job_ids: list[int] = Field(description="The failed jobs of this page whose reports make up the suite.")
    name: str | None
    classname: str | None
    file: str | None
    status: str | None = Field(description="`failed` or `error`.")
    stack_trace: str | None = Field(description=f"Its start, at most {MAX_STACK_TRACE_CHARS} characters.")
    stack_trace_truncated: bool


class ReportSummary(_Out):
    """The pipeline's whole test report, counted by GitLab."""

    count: int | None = Field(description="Test cases in all reports.")
    failed: int | None
    error: int | None
    suite_error: str | None = Field(description="Why GitLab could not parse a report, if so.")
    failed_tests_not_shown: int = Field(
        description="Failed or errored cases of this page's suites left out of failed_tests (bounds)."
    )


# -- the read ---------------------------------------------------------------------------------------


async def read_failures(
    gitlab: GitLabSession,
    project: str,
    variables: dict[str, Any],
    jobs: list[Any],
    summary: ReportSummaryNode | None,
    iid_of: IidOf,
) -> tuple[list[PipelineFailure], list[FailedTest], ReportSummary | None]:
    """The facet for this page of failed ``jobs`` (``JobNode``s with failureMessage/exitCode).

    Args:
        variables: the ``getPipeline`` variables (its project address and pipeline id are reused).
    """
    job_ids = {job.id for job in jobs}
    suites = _suites_with_failures(summary, job_ids)
    suite_of: dict[int, str | None] = {}
    for suite in _all_suites(summary):
        for build in suite.buildIds or []:
            if build.isdigit() and int(build) in job_ids:
                suite_of.setdefault(int(build), suite.name)
    tests_task = asyncio.ensure_future(_failed_tests(gitlab, variables, suites, job_ids, iid_of))
    semaphore = asyncio.Semaphore(LOG_READ_CONCURRENCY)

    async def log_of(job_id: int) -> tuple[FailureLog | None, str | None]:
        async with semaphore:
            return await read_failure_log(gitlab, project, job_id)

    try:
        logs = await asyncio.gather(*(log_of(job.id) for job in jobs))
        tests, not_shown = await tests_task
    finally:
        tests_task.cancel()
    failures = [
        PipelineFailure(
            id=job.id,
            name=job.name,
            status=job.status.lower() if job.status else None,
            stage=job.stage.name if job.stage else None,
            allow_failure=bool(job.allowFailure),
            web_url=gitlab.web_url(job.webPath) if job.webPath else None,
            failure_message=job.failureMessage,
            exit_code=job.exitCode,
            test_suite=suite_of.get(job.id),
            log=log,
            log_error=error,
        )
        for job, (log, error) in zip(jobs, logs, strict=True)
    ]
    total = summary.total if summary else None
    test_summary = (
        ReportSummary(
            count=total.count,
            failed=total.failed,
            error=total.error,
            suite_error=total.suiteError,
            failed_tests_not_shown=not_shown,
        )
        if total is not None
        else None
    )
    return failures, tests, test_summary


def _all_suites(summary: ReportSummaryNode | None) -> list[SuiteSummaryNode]:
    if summary is None or summary.testSuites is None:
        return []
    return [s for s in summary.testSuites.nodes or [] if s is not None]


def _suites_with_failures(summary: ReportSummaryNode | None, job_ids: set[int]) -> list[SuiteSummaryNode]:
    """Suites with failed or errored cases that hold a report of a job on this page."""
    return [
        s
        for s in _all_suites(summary)
        if (s.failedCount or 0) + (s.errorCount or 0) > 0
        and any(b.isdigit() and int(b) in job_ids for b in s.buildIds or [])
    ]


async def _failed_tests(
    gitlab: GitLabSession,
    variables: dict[str, Any],
    suites: list[SuiteSummaryNode],
    job_ids: set[int],
    iid_of: IidOf,
) -> tuple[list[FailedTest], int]:
    """The failed cases of ``suites`` (one request), and how many were left out."""
    if not suites:
        return [], 0
    read, skipped = suites[:MAX_TEST_SUITES], suites[MAX_TEST_SUITES:]
    not_shown = sum((s.failedCount or 0) + (s.errorCount or 0) for s in skipped)
    wanted = max((s.failedCount or 0) + (s.errorCount or 0) for s in read)
    test_vars: dict[str, Any] = {
        key: variables[key] for key in ("byId", "fullPath", "projectIds", "pipelineId") if key in variables
    }
    test_vars["cases"] = min(wanted, MAX_TESTS_PER_SUITE)
    for index in range(MAX_TEST_SUITES):
        builds = read[index].buildIds or [] if index < len(read) else []
        test_vars[f"suite{index}"] = builds
        test_vars[f"read{index}"] = bool(builds)
    node = (await GET_PIPELINE_TEST_CASES.run(gitlab, test_vars, iid_of=iid_of)).project_node()
    pipeline = node.pipeline if node else None
    tests: list[FailedTest] = []
    for index, summary in enumerate(read):
        failing = (summary.failedCount or 0) + (summary.errorCount or 0)
        suite = pipeline.suite(index) if pipeline else None
        cases = [c for c in (suite.testCases.nodes or [] if suite and suite.testCases else []) if c]
        shown = 0
        for case in cases:
            if case.status not in ("failed", "error"):
                continue
            if shown >= MAX_TESTS_PER_SUITE or len(tests) >= MAX_FAILED_TESTS:
                break
            trace, cut = _cut_start(case.stackTrace, MAX_STACK_TRACE_CHARS)
            tests.append(
                FailedTest(
                    suite=summary.name,
                    job_ids=sorted(
                        int(b) for b in summary.buildIds or [] if b.isdigit() and int(b) in job_ids
                    ),
                    name=case.name,
                    classname=case.classname,
                    file=case.file,
                    status=case.status,
                    stack_trace=trace,
                    stack_trace_truncated=cut,
                )
            )
            shown += 1
        not_shown += max(0, failing - shown)
    return tests, not_shown


async def read_failure_log(
    gitlab: GitLabSession, project: str, job_id: int
) -> tuple[FailureLog | None, str | None]:
    """The end of the failing section of one job's log, or why it could not be read."""
    try:
        async with gitlab.stream(
            TRACE_ROUTE, path_params={"id": encode_project(project), "job_id": job_id}
        ) as body:
            tail = await read_tail(body.chunks(), READ_TAIL_LINES)
    except GitLabUnauthorized as exc:
        return None, (
            f"GitLab refused to show this job's log ({exc.status or 403}): your token may read the pipeline "
            "but not its job logs (reading a log needs at least the Reporter role on the project)."
        )
    except GitLabNotFound:
        return None, "GitLab has no log for this job (it was erased, or never written)."
    except GitLabError as exc:
        return None, f"The log could not be read: {exc.message}"
    # Lines end at "\n" only, as the cleaner counts them (str.splitlines would also split at
    # U+2028 and friends, and shift every line number after one).
    lines = tail.content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    first_kept = tail.first_line
    last_kept = first_kept + len(lines) - 1
    section = failing_section(tail.sections)
    first, last = first_kept, last_kept
    if section is not None and section.last_line >= first_kept and section.first_line <= last_kept:
        first, last = max(section.first_line, first_kept), min(section.last_line, last_kept)
    else:
        section = None  # its lines fell out of the tail held: show the log's own end
    first = max(first, last - LOG_TAIL_LINES + 1)
    chosen = lines[first - first_kept : last - first_kept + 1]
    text = "\n".join(chosen)
    truncated = False
    if len(text) > MAX_LOG_CHARS:
        text, truncated = CUT_MARK + text[-(MAX_LOG_CHARS - 1) :], True
    return (
        FailureLog(
            section=section.name if section else None,
            first_line=first,
            last_line=max(first, last) if chosen else first - 1,
            total_lines=tail.total_lines,
            total_bytes=tail.total_bytes,
            text=text,
            truncated=truncated,
        ),
        None,
    )


def _cut_start(text: str | None, limit: int) -> tuple[str | None, bool]:
    if text is None or len(text) <= limit:
        return text, False
    return text[: limit - 1] + CUT_MARK, True


def fit_answer(failures: list[PipelineFailure], tests: list[FailedTest], size: Callable[[], int]) -> None:
    """Shorten the longest log texts and stack traces (halving each time) until the answer's JSON
    (``size()`` characters) fits :data:`MAX_ANSWER_CHARS`."""
    while size() > MAX_ANSWER_CHARS:
        texts: list[tuple[int, Any, str]] = [
            (len(f.log.text), f.log, "text") for f in failures if f.log is not None and len(f.log.text) > 200
        ] + [
            (len(t.stack_trace), t, "stack_trace")
            for t in tests
            if t.stack_trace and len(t.stack_trace) > 200
        ]
        if not texts:
            return
        length, holder, attr = max(texts, key=lambda item: item[0])
        keep = length // 2
        value: str = getattr(holder, attr)
        if attr == "text":
            holder.text, holder.truncated = CUT_MARK + value[-keep:], True
        else:
            holder.stack_trace, holder.stack_trace_truncated = value[:keep] + CUT_MARK, True
