"""The stand-in's REST answers for the routes the gateway calls match GitLab's documented answers.

The schemas (:mod:`tests.gitlab.rest_schemas`) are this project's, written from GitLab's REST API
documentation (https://docs.gitlab.com/api/jobs/, /api/pipelines/, /api/commits/,
/api/branches/, /api/version/, /api/metadata/, /api/repository_files/): every documented key GitLab
always sends is required, with its JSON type and nullability, and no undocumented key is allowed.
Each answer here comes from the stand-in's route handlers over its seed data, no process.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.gitlab.rest_schemas import SCHEMAS
from tests.standin import dataset as ds
from tests.standin import job_logs
from tests.standin.rest_api import RestOutcome, RestRequest, dispatch, split_raw_path


def errors(schema: str, instance: Any) -> list[str]:
    """Where ``instance`` breaks the documented answer ``schema`` (``"job"``)."""
    validator = Draft202012Validator(SCHEMAS[schema])
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(instance)]


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


def test_every_schema_is_valid_draft_2020_12() -> None:
    for schema in SCHEMAS.values():
        Draft202012Validator.check_schema(schema)


P = ds.PROJECT_ID
README = ds.FILES["readme"].replace("/", "%2F")
ROUTES = [
    ("GET", f"/projects/{P}/jobs/{job_logs.FAILED_LOG_JOB_ID}", "job", False),
    ("GET", f"/projects/{P}/jobs/{job_logs.ARTIFACTS_JOB_ID}", "job", False),
    ("GET", f"/projects/{P}/jobs/5202", "job", False),
    ("GET", f"/projects/{P}/pipelines/{ds.PIPELINE_ID}/jobs", "job", True),
    ("GET", f"/projects/{P}/pipelines/{ds.PIPELINE_ID}", "pipeline", False),
    ("GET", f"/projects/{P}/pipelines/{ds.RUNNING_PIPELINE_ID}", "pipeline", False),
    ("GET", f"/projects/{P}/repository/commits/{ds.REF_SHAS['main']}", "commit", False),
    ("GET", f"/projects/{P}/repository/branches/main", "branch", False),
    ("GET", f"/projects/{P}/repository/branches", "branch", True),
    ("GET", f"/projects/{P}/repository/files/{README}", "repository_file", False),
    ("GET", "/version", "version", False),
    ("GET", "/metadata", "metadata", False),
]


@pytest.mark.parametrize(("method", "path", "schema", "is_list"), ROUTES, ids=[r[1] for r in ROUTES])
def test_answer_matches_gitlabs_documentation(method: str, path: str, schema: str, is_list: bool) -> None:
    got = answer(method, path)
    assert got.status == 200, got.body
    items = got.body if is_list else [got.body]
    assert items
    assert [e for item in items for e in errors(schema, item)] == []


def test_created_pipeline_matches_gitlabs_documentation() -> None:
    got = answer(
        "POST", f"/projects/{P}/pipeline", {"ref": "main", "variables": [{"key": "A", "value": "1"}]}
    )
    assert got.status == 201, got.body
    assert errors("pipeline", got.body) == []
    assert got.body["status"] == "created" and got.body["ref"] == "main"


def test_a_retried_job_matches_gitlabs_documentation() -> None:
    got = answer("POST", f"/projects/{P}/jobs/{job_logs.FAILED_LOG_JOB_ID}/retry")
    assert got.status == 201, got.body
    assert errors("job", got.body) == []
    assert got.body["status"] == "pending" and got.body["id"] != job_logs.FAILED_LOG_JOB_ID


def test_the_schemas_catch_a_wrong_answer() -> None:
    job = answer("GET", f"/projects/{P}/jobs/{job_logs.FAILED_LOG_JOB_ID}").body
    assert errors("job", {**job, "surprise": 1}) != []  # a key GitLab does not document
    assert errors("job", {k: v for k, v in job.items() if k != "pipeline"}) != []  # one it always sends
    assert errors("job", {**job, "duration": "180"}) != []  # a wrong type
    assert errors("job", {**job, "pipeline": {**job["pipeline"], "id": None}}) != []  # null where none is
    assert errors("job", {**job, "created_at": "yesterday"}) != []  # not a timestamp
