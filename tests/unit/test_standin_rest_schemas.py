"""The stand-in's REST answers for the routes the gateway calls match GitLab's own response schemas.

GitLab's test suite checks its API's answers against ``spec/fixtures/api/schemas/*.json``; the
same files are kept in ``tests/gitlab/rest_schemas`` (see its README), ``$ref``s resolved between
them. Each answer here comes from the stand-in's route handlers over its seed data, no process.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft4Validator
from jsonschema.validators import extend
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

from tests.standin import dataset as ds
from tests.standin import job_logs
from tests.standin.rest_api import RestOutcome, RestRequest, dispatch, split_raw_path

SCHEMAS = Path(__file__).resolve().parents[1] / "gitlab" / "rest_schemas"
BASE = "https://gitlab.invalid/schemas/"

# GitLab's pipeline/detail.json types its dates "date" (its Ruby validator accepts it): a string here.
_Validator = extend(  # type: ignore[no-untyped-call]
    Draft4Validator,
    type_checker=Draft4Validator.TYPE_CHECKER.redefine(
        "date", lambda _checker, value: isinstance(value, str)
    ),
)


@cache
def registry() -> Registry[Any]:
    resources = [
        (
            f"{BASE}{path.relative_to(SCHEMAS).as_posix()}",
            DRAFT4.create_resource(json.loads(path.read_text())),
        )
        for path in SCHEMAS.rglob("*.json")
    ]
    return Registry().with_resources(resources)


# Fields GitLab's entities expose that its schema files leave out (GitLab's own tests check those
# schemas on jobs that did not fail): a failed job's `failure_reason`, https://docs.gitlab.com/api/jobs/.
DOCUMENTED_EXTRAS = {"public_api/v4/job.json": ("failure_reason",)}


def errors(schema: str, instance: Any) -> list[str]:
    """Where ``instance`` breaks GitLab's schema ``schema`` (``public_api/v4/job.json``)."""
    if isinstance(instance, dict):
        instance = {k: v for k, v in instance.items() if k not in DOCUMENTED_EXTRAS.get(schema, ())}
    resource: Resource[Any] = registry().get_or_retrieve(f"{BASE}{schema}").value
    validator = _Validator(resource.contents, registry=registry(), _resolver=None)
    validator = validator.evolve(schema={"$ref": f"{BASE}{schema}"})
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


def answer(method: str, path: str, body: dict[str, Any] | None = None) -> RestOutcome:
    world = ds.build_world()
    segments, _ = split_raw_path(path)
    query = {"ref": "main"} if "/repository/files/" in path else {}
    request = RestRequest(
        world=world,
        user=world.user_for_token(ds.ALICE_TOKEN),
        authenticated=True,
        method=method,
        segments=segments,
        query=query,
        query_lists={k: [v] for k, v in query.items()},
        web_root="http://gitlab.invalid",
        api_root="http://gitlab.invalid/api/v4",
        body=json.dumps(body).encode() if body is not None else b"",
    )
    return dispatch(request)


P = ds.PROJECT_ID
ROUTES = [
    ("GET", f"/projects/{P}/jobs/{job_logs.FAILED_LOG_JOB_ID}", "public_api/v4/job.json", False),
    ("GET", f"/projects/{P}/jobs/{job_logs.ARTIFACTS_JOB_ID}", "public_api/v4/job.json", False),
    ("GET", f"/projects/{P}/jobs/5202", "public_api/v4/job.json", False),
    ("GET", f"/projects/{P}/pipelines/{ds.PIPELINE_ID}/jobs", "public_api/v4/job.json", True),
    ("GET", f"/projects/{P}/pipelines/{ds.PIPELINE_ID}", "public_api/v4/pipeline/detail.json", False),
    ("GET", f"/projects/{P}/pipelines/{ds.RUNNING_PIPELINE_ID}", "public_api/v4/pipeline/detail.json", False),
    (
        "GET",
        f"/projects/{P}/repository/commits/{ds.REF_SHAS['main']}",
        "public_api/v4/commit/detail.json",
        False,
    ),
    ("GET", f"/projects/{P}/repository/branches/main", "public_api/v4/branch.json", False),
    ("GET", f"/projects/{P}/repository/branches", "public_api/v4/branch.json", True),
    ("GET", "/version", "public_api/v4/metadata.json", False),
    ("GET", "/metadata", "public_api/v4/metadata.json", False),
]


@pytest.mark.parametrize(("method", "path", "schema", "is_list"), ROUTES, ids=[r[1] for r in ROUTES])
def test_answer_matches_gitlabs_schema(method: str, path: str, schema: str, is_list: bool) -> None:
    got = answer(method, path)
    assert got.status == 200, got.body
    items = got.body if is_list else [got.body]
    assert items
    assert [e for item in items for e in errors(schema, item)] == []


def test_created_pipeline_matches_gitlabs_schema() -> None:
    got = answer(
        "POST", f"/projects/{P}/pipeline", {"ref": "main", "variables": [{"key": "A", "value": "1"}]}
    )
    assert got.status == 201, got.body
    assert errors("public_api/v4/pipeline/detail.json", got.body) == []
    assert got.body["status"] == "created" and got.body["ref"] == "main"


def test_a_retried_job_matches_gitlabs_schema() -> None:
    got = answer("POST", f"/projects/{P}/jobs/{job_logs.FAILED_LOG_JOB_ID}/retry")
    assert got.status == 201, got.body
    assert errors("public_api/v4/job.json", got.body) == []
    assert got.body["status"] == "pending" and got.body["id"] != job_logs.FAILED_LOG_JOB_ID


def test_the_schemas_catch_a_wrong_answer() -> None:
    job = answer("GET", f"/projects/{P}/jobs/{job_logs.FAILED_LOG_JOB_ID}").body
    assert errors("public_api/v4/job.json", {**job, "surprise": 1}) != []
    assert errors("public_api/v4/job.json", {k: v for k, v in job.items() if k != "pipeline"}) != []
