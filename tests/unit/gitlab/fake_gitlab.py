"""An in-memory GitLab GraphQL endpoint for unit tests (respx side effect).

Every document the gateway sends is parsed and validated against GitLab's complete schema
(``tests/gitlab/gitlab_schema.graphql``) and executed on it with graphql-core, over resolvers
reading a small data set. So answers have GitLab's exact shape (aliases, ``@include``/``@skip``,
nullability), and an invalid document or variable fails the test instead of being answered. A
cursor it did not hand out is answered as GitLab does: "Please provide a valid cursor" in
``errors``, the connection null in ``data``.

The data set mirrors the e2e stand-in's: project ``grp/sub/proj`` (id 42) with pipeline 987654
(status failed) of 45 build jobs, 3 of them failed, and 2 bridges; bridge ``trigger-child``
(failed) started child pipeline 987655 in the same project, bridge ``trigger-deploy`` (success)
started 987656 in ``other/private``, which the caller cannot read.

Test reports: :attr:`FakeGitLab.test_cases` maps a build's id to its JUnit test cases (GraphQL
``TestCase`` dicts); jobs 1005 and 1020 (suite ``rspec``) have one failed and one errored case.
``Pipeline.testReportSummary`` counts them per suite (the job name without its ``N/M`` index) and
``Pipeline.testSuite(buildIds:)`` merges those builds' cases, errors and failures first.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import httpx
from graphql import GraphQLError, GraphQLSchema, execute_sync, parse, validate

from tests.conftest import GITLAB_SCHEMA
from tests.standin.schema_cache import build_gitlab_schema

GITLAB = "https://gitlab.example.com"
GRAPHQL_URL = f"{GITLAB}/api/graphql"
PROJECT_PATH = "grp/sub/proj"
PROJECT_ID = 42
PIPELINE_ID = 987654
CHILD_PIPELINE_ID = 987655
PRIVATE_PIPELINE_ID = 987656
SHA = "9a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
FAILED_JOB_IDS = (1005, 1020, 1040)
JOB_IDS = tuple(range(1001, 1046))  # 45 build jobs
BRIDGE_IDS = (2001, 2002)
FAILING_TEST = {
    "name": "Checkout applies the discount",
    "classname": "spec.checkout_spec",
    "file": "./spec/checkout_spec.rb",
    "status": "failed",
    "stackTrace": "Failure/Error: expect(total).to eq(90)\n  expected: 90\n       got: 100",
}
ERROR_TEST = {
    "name": "Invoice renders",
    "classname": "spec.invoice_spec",
    "file": "./spec/invoice_spec.rb",
    "status": "error",
    "stackTrace": "NameError: uninitialized constant PdfRenderer",
}


def passed(n: int) -> dict[str, Any]:
    return {
        "name": f"passes {n}",
        "classname": "spec.ok_spec",
        "file": None,
        "status": "success",
        "stackTrace": None,
    }


@cache
def gitlab_schema() -> GraphQLSchema:
    """GitLab's schema, built once per test process."""
    return build_gitlab_schema(GITLAB_SCHEMA)


def _cursor(offset: int) -> str:
    return base64.b64encode(json.dumps({"offset": offset}).encode()).decode()


#: What GitLab's keyset connections answer for a cursor they cannot decode.
CURSOR_REFUSED = "Please provide a valid cursor"


def _offset(after: str | None) -> int:
    if not after:
        return 0
    try:
        return int(json.loads(base64.b64decode(after, validate=True))["offset"]) + 1
    except (ValueError, KeyError, TypeError):
        raise GraphQLError(CURSOR_REFUSED) from None


def connection(items: list[Any], first: int | None, after: str | None) -> dict[str, Any]:
    """A relay connection page over ``items`` (GitLab's default page size is 100)."""
    start = _offset(after)
    size = 100 if first is None else first
    page = items[start : start + size]
    end = start + len(page) - 1
    return {
        "nodes": page,
        "pageInfo": {
            "hasNextPage": start + size < len(items),
            "hasPreviousPage": start > 0,
            "startCursor": _cursor(start) if page else None,
            "endCursor": _cursor(end) if page else None,
        },
    }


@dataclass
class FakeGitLab:
    """The data set and the GraphQL handler; ``requests`` records every body received."""

    sub_path: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    projects: dict[str, dict[str, Any]] = field(default_factory=dict)
    test_cases: dict[int, list[dict[str, Any]]] = field(
        default_factory=lambda: {
            FAILED_JOB_IDS[0]: [passed(1), FAILING_TEST],
            FAILED_JOB_IDS[1]: [ERROR_TEST, passed(2)],
        }
    )

    def __post_init__(self) -> None:
        root = self.sub_path
        private = self._project("other/private", 77, readable=False)
        proj = self._project(PROJECT_PATH, PROJECT_ID)
        child = self._pipeline(proj, CHILD_PIPELINE_ID, "FAILED", "parent_pipeline", jobs=[])
        hidden = self._pipeline(private, PRIVATE_PIPELINE_ID, "SUCCESS", "pipeline", jobs=[])
        jobs = []
        for n, job_id in enumerate(JOB_IDS):
            failed = job_id in FAILED_JOB_IDS
            jobs.append(
                {
                    "id": f"gid://gitlab/Ci::Build/{job_id}",
                    "kind": "BUILD",
                    "name": f"rspec {n + 1}/45",
                    "status": "FAILED" if failed else "SUCCESS",
                    "allowFailure": job_id == FAILED_JOB_IDS[-1],
                    "stage": {"id": "gid://gitlab/Ci::Stage/1", "name": "test" if n else "build"},
                    "webPath": f"{root}/{PROJECT_PATH}/-/jobs/{job_id}",
                    "downstreamPipeline": None,
                    "failureMessage": "The script failed with exit code 1" if failed else None,
                    "exitCode": 1 if failed else 0,
                }
            )
        bridges = [
            {
                "id": f"gid://gitlab/Ci::Bridge/{BRIDGE_IDS[0]}",
                "kind": "BRIDGE",
                "name": "trigger-child",
                "status": "FAILED",
                "allowFailure": False,
                "stage": {"name": "deploy"},
                "webPath": f"{root}/{PROJECT_PATH}/-/jobs/{BRIDGE_IDS[0]}",
                "downstreamPipeline": child,
            },
            {
                "id": f"gid://gitlab/Ci::Bridge/{BRIDGE_IDS[1]}",
                "kind": "BRIDGE",
                "name": "trigger-deploy",
                "status": "SUCCESS",
                "allowFailure": False,
                "stage": {"name": "deploy"},
                "webPath": f"{root}/{PROJECT_PATH}/-/jobs/{BRIDGE_IDS[1]}",
                "downstreamPipeline": hidden,  # not readable by the caller: resolves to null
            },
        ]
        self._pipeline(proj, PIPELINE_ID, "FAILED", "push", jobs=jobs + bridges, downstream=[child, hidden])

    # -- data ------------------------------------------------------------------------------

    def _project(self, full_path: str, number: int, *, readable: bool = True) -> dict[str, Any]:
        project: dict[str, Any] = {
            "id": f"gid://gitlab/Project/{number}",
            "fullPath": full_path,
            "webUrl": f"{GITLAB}{self.sub_path}/{full_path}",
            "readable": readable,
            "pipelines_by_id": {},
        }

        def pipeline(_info: Any, id: str | None = None, **_: Any) -> dict[str, Any] | None:
            found: dict[str, Any] | None = project["pipelines_by_id"].get(id)
            return found

        project["pipeline"] = pipeline
        self.projects[full_path] = project
        return project

    def _pipeline(
        self,
        project: dict[str, Any],
        number: int,
        status: str,
        source: str,
        *,
        jobs: list[dict[str, Any]],
        downstream: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        readable: Callable[[dict[str, Any]], bool] = lambda p: bool(p["project"]["readable"])  # noqa: E731

        def jobs_field(
            _info: Any,
            jobKind: str | None = None,
            statuses: list[str] | None = None,
            first: int | None = None,
            after: str | None = None,
            **_: Any,
        ) -> dict[str, Any]:
            chosen = [
                {
                    **j,
                    "downstreamPipeline": j["downstreamPipeline"]
                    if j["downstreamPipeline"] is None or readable(j["downstreamPipeline"])
                    else None,
                }
                for j in jobs
                if (jobKind is None or j["kind"] == jobKind) and (not statuses or j["status"] in statuses)
            ]
            return connection(chosen, first, after)

        def downstream_field(_info: Any, first: int | None = None, after: str | None = None, **_: Any) -> Any:
            # GitLab's object-level read_pipeline check drops what the caller cannot read.
            return connection([p for p in downstream or [] if readable(p)], first, after)

        def suite_name(job: dict[str, Any]) -> str:
            return str(job["name"]).rsplit(" ", 1)[0] if "/" in str(job["name"]) else str(job["name"])

        def reported() -> dict[str, list[tuple[int, list[dict[str, Any]]]]]:
            suites: dict[str, list[tuple[int, list[dict[str, Any]]]]] = {}
            for job in jobs:
                number = int(str(job["id"]).rsplit("/", 1)[1])
                if job["kind"] == "BUILD" and number in self.test_cases:
                    suites.setdefault(suite_name(job), []).append((number, self.test_cases[number]))
            return suites

        def counts(name: str, builds: list[tuple[int, list[dict[str, Any]]]]) -> dict[str, Any]:
            cases = [c for _, cs in builds for c in cs]
            return {
                "name": name,
                "buildIds": [str(n) for n, _ in builds],
                "totalCount": len(cases),
                "failedCount": sum(c["status"] == "failed" for c in cases),
                "errorCount": sum(c["status"] == "error" for c in cases),
                "suiteError": None,
            }

        def summary(_info: Any) -> dict[str, Any]:
            suites = [counts(name, builds) for name, builds in reported().items()]
            return {
                "total": {
                    "count": sum(s["totalCount"] for s in suites),
                    "failed": sum(s["failedCount"] for s in suites),
                    "error": sum(s["errorCount"] for s in suites),
                    "suiteError": None,
                },
                "testSuites": lambda _info, first=None, after=None, **_: connection(suites, first, after),
            }

        def test_suite(_info: Any, buildIds: list[str]) -> dict[str, Any] | None:
            wanted = {int(b) for b in buildIds}
            for name, builds in reported().items():
                chosen = [(n, cs) for n, cs in builds if n in wanted]
                if chosen:
                    order = {"error": 0, "failed": 1}
                    cases = sorted(
                        (c for _, cs in chosen for c in cs), key=lambda c: order.get(c["status"], 2)
                    )
                    return {
                        **counts(name, chosen),
                        "testCases": lambda _info, first=None, after=None, cases=cases, **_: connection(
                            cases, first, after
                        ),
                    }
            return None

        pipeline = {
            "testReportSummary": summary,
            "testSuite": test_suite,
            "id": f"gid://gitlab/Ci::Pipeline/{number}",
            "iid": str(number % 1000),
            "status": status,
            "ref": "main",
            "sha": SHA,
            "source": source,
            "path": f"{self.sub_path}/{project['fullPath']}/-/pipelines/{number}",
            "project": project,
            "jobs": jobs_field,
            "downstream": downstream_field,
        }
        project["pipelines_by_id"][pipeline["id"]] = pipeline
        return pipeline

    # -- GraphQL ---------------------------------------------------------------------------

    def root(self) -> dict[str, Any]:
        """The Query object: ``project(fullPath:)`` and ``projects(ids:)`` over readable projects."""
        visible = {p: v for p, v in self.projects.items() if v["readable"]}

        def project(_info: Any, fullPath: str) -> dict[str, Any] | None:
            return visible.get(fullPath)

        def projects(_info: Any, ids: list[str] | None = None, first: int | None = None, **_: Any) -> Any:
            found = [p for p in visible.values() if ids is None or p["id"] in ids]
            return connection(found, first, None)

        return {"project": project, "projects": projects}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        """respx side effect: validate, execute and answer one ``POST /api/graphql``."""
        body = json.loads(request.content)
        self.requests.append(body)
        document = parse(body["query"])
        errors = validate(gitlab_schema(), document)
        assert not errors, f"invalid GraphQL document: {[e.message for e in errors]}"
        result = execute_sync(
            gitlab_schema(),
            document,
            root_value=self.root(),
            variable_values=body.get("variables"),
            operation_name=body.get("operationName"),
        )
        unexpected = [e.message for e in result.errors or [] if e.message != CURSOR_REFUSED]
        assert not unexpected, f"GraphQL execution failed: {unexpected}"
        if result.errors:
            # GitLab's answer to a refused cursor: the connection null in `data`, the error beside it.
            return httpx.Response(
                200, json={"data": result.data, "errors": [e.formatted for e in result.errors]}
            )
        return httpx.Response(200, json={"data": result.data})
