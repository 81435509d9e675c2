"""The GitLab stand-in itself behaves like GitLab: shapes, paging, auth, faults, request log.

Talks to the stand-in process directly over HTTP (no gateway), through the same fixtures the
gateway's end-to-end tests use.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.standin import content
from tests.standin import dataset as ds
from tests.standin.control import StandinControlError
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

#: Documents of the shapes the gateway sends, written by hand (valid against GitLab's schema).
SAMPLE_OPS = Path(__file__).resolve().parent / "sample_documents"
PIPELINE_GID = f"gid://gitlab/Ci::Pipeline/{ds.PIPELINE_ID}"

JOBS_PAGE = """
query JobsPage(
  $fullPath: ID!, $pipelineId: CiPipelineID!, $first: Int, $after: String, $statuses: [CiJobStatus!]
) {
  project(fullPath: $fullPath) {
    pipeline(id: $pipelineId) {
      jobs(jobKind: BUILD, statuses: $statuses, first: $first, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes { id name status allowFailure stage { name } webPath }
      }
    }
  }
}
"""

PIPELINE_FACETS = """
query Facets($fullPath: ID!, $pipelineId: CiPipelineID!) {
  project(fullPath: $fullPath) {
    pipeline(id: $pipelineId) {
      id
      downstream { nodes { id status project { fullPath } } }
      bridgeJobs: jobs(jobKind: BRIDGE) {
        nodes { id name status downstreamPipeline { id project { fullPath } } }
      }
    }
  }
}
"""

BLOBS = """
query Blobs($fullPath: ID!, $ref: String!, $paths: [String!]!, $refType: RefType) {
  project(fullPath: $fullPath) {
    repository {
      blobs(ref: $ref, paths: $paths, refType: $refType) {
        nodes { path name size rawSize rawTextBlob storedExternally externalStorage }
      }
      commit(ref: $ref) { sha }
    }
  }
}
"""

WORKFLOW = """
query Workflow($workflowId: AiDuoWorkflowsWorkflowID!) {
  duoWorkflowWorkflows(workflowId: $workflowId) {
    nodes {
      id statusName statusGroup webUrl
      latestCheckpoint {
        lastDuoMessage { content role messageType }
        duoMessages { content role messageType }
      }
    }
  }
}
"""


def gql(
    standin: Standin,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    token: str | None = ds.ALICE_TOKEN,
) -> dict[str, Any]:
    response = standin.graphql(query, variables, token=token)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()  # type: ignore[no-any-return]


def data(standin: Standin, query: str, variables: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    payload = gql(standin, query, variables, **kw)
    assert "errors" not in payload, payload["errors"]
    return payload["data"]  # type: ignore[no-any-return]


def sample(name: str) -> str:
    return (SAMPLE_OPS / name).read_text()


# -- the sample documents -------------------------------------------------------------------------


def test_sample_pipeline_jobs_document(fresh_standin: Standin) -> None:
    out = data(
        fresh_standin,
        sample("op1_pipeline_jobs.graphql"),
        {"fullPath": ds.PROJECT_PATH, "pipelineId": PIPELINE_GID, "first": 20},
    )
    project = out["project"]
    assert project["webUrl"] == f"{fresh_standin.url}/{ds.PROJECT_PATH}"
    pipeline = project["pipeline"]
    assert {k: pipeline[k] for k in ("id", "status", "ref", "sha", "source", "path")} == {
        "id": PIPELINE_GID,
        "status": "FAILED",
        "ref": "main",
        "sha": ds.COMMITS["main"],
        "source": "push",
        "path": f"/{ds.PROJECT_PATH}/-/pipelines/{ds.PIPELINE_ID}",
    }
    jobs = pipeline["jobs"]
    assert len(jobs["nodes"]) == 20 and jobs["pageInfo"]["hasNextPage"] is True
    assert isinstance(jobs["pageInfo"]["endCursor"], str) and jobs["pageInfo"]["endCursor"]
    assert jobs["nodes"][0] == {
        "id": "gid://gitlab/Ci::Build/5001",
        "name": "build:linux",
        "status": "SUCCESS",
        "allowFailure": False,
        "stage": {"name": "build"},
        "webPath": f"/{ds.PROJECT_PATH}/-/jobs/5001",
    }
    # alice cannot read grp/private-proj: its downstream pipeline is redacted, its bridge's link is null.
    assert pipeline["downstream"]["nodes"] == [
        {
            "id": f"gid://gitlab/Ci::Pipeline/{ds.CHILD_PIPELINE_ID}",
            "status": "FAILED",
            "ref": "main",
            "sha": ds.COMMITS["main"],
            "source": "parent_pipeline",
            "path": f"/{ds.PROJECT_PATH}/-/pipelines/{ds.CHILD_PIPELINE_ID}",
            "project": {"fullPath": ds.PROJECT_PATH},
        }
    ]
    assert pipeline["bridgeJobs"]["nodes"] == [
        {
            "id": f"gid://gitlab/Ci::Bridge/{ds.BRIDGE_CHILD_JOB_ID}",
            "name": "trigger-child",
            "status": "FAILED",
            "downstreamPipeline": {
                "id": f"gid://gitlab/Ci::Pipeline/{ds.CHILD_PIPELINE_ID}",
                "status": "FAILED",
            },
        },
        {
            "id": f"gid://gitlab/Ci::Bridge/{ds.BRIDGE_PRIVATE_JOB_ID}",
            "name": "trigger-downstream",
            "status": "SUCCESS",
            "downstreamPipeline": None,
        },
    ]


def test_sample_pipeline_create_document_records_variables_and_inputs(fresh_standin: Standin) -> None:
    variables = [
        {"key": "DEPLOY", "value": "1", "variableType": "ENV_VAR"},
        {"key": "CONFIG", "value": "a: 1", "variableType": "FILE"},
    ]
    inputs = [{"name": "environment", "value": "production"}, {"name": "dry_run", "value": True}]
    out = data(
        fresh_standin,
        sample("op2_pipeline_create.graphql"),
        {"input": {"projectPath": ds.PROJECT_PATH, "ref": "main", "variables": variables, "inputs": inputs}},
    )
    created = out["pipelineCreate"]
    assert created == {
        "errors": [],
        "pipeline": {
            "id": f"gid://gitlab/Ci::Pipeline/{ds.FIRST_CREATED_PIPELINE_ID}",
            "status": "CREATED",
            "ref": "main",
            "path": f"/{ds.PROJECT_PATH}/-/pipelines/{ds.FIRST_CREATED_PIPELINE_ID}",
            "project": {"webUrl": f"{fresh_standin.url}/{ds.PROJECT_PATH}"},
        },
    }
    [recorded] = fresh_standin.control.pipelines(created=True)
    assert recorded["variables"] == variables and recorded["inputs"] == inputs
    assert [j["name"] for j in recorded["jobs"]] == ["build", "rspec", "deploy"]
    # Each call creates a new pipeline.
    again = data(
        fresh_standin,
        sample("op2_pipeline_create.graphql"),
        {"input": {"projectPath": ds.PROJECT_PATH, "ref": "feature"}},
    )
    assert (
        again["pipelineCreate"]["pipeline"]["id"]
        == f"gid://gitlab/Ci::Pipeline/{ds.FIRST_CREATED_PIPELINE_ID + 1}"
    )


def test_sample_retry_and_cancel_documents(fresh_standin: Standin) -> None:
    retried = data(fresh_standin, sample("op3a_pipeline_retry.graphql"), {"id": PIPELINE_GID})[
        "pipelineRetry"
    ]
    assert retried == {"errors": [], "pipeline": {"id": PIPELINE_GID, "status": "RUNNING", "ref": "main"}}
    state = fresh_standin.control.pipeline(ds.PIPELINE_ID)
    assert sum(1 for j in state["jobs"] if j["retried"]) == 4  # 3 failed + 1 canceled build job
    running = f"gid://gitlab/Ci::Pipeline/{ds.RUNNING_PIPELINE_ID}"
    canceled = data(fresh_standin, sample("op3b_pipeline_cancel.graphql"), {"id": running})["pipelineCancel"]
    assert canceled == {"errors": [], "pipeline": {"id": running, "status": "CANCELED", "ref": "feature"}}


def test_sample_duo_workflow_document(fresh_standin: Standin) -> None:
    wid = ds.WORKFLOWS["finished"]
    out = data(
        fresh_standin,
        sample("op4_duo_workflow.graphql"),
        {"workflowId": f"gid://gitlab/Ai::DuoWorkflows::Workflow/{wid}"},
    )
    [node] = out["duoWorkflowWorkflows"]["nodes"]
    project_url = f"{fresh_standin.url}/{ds.PROJECT_PATH}"
    assert node["id"] == f"gid://gitlab/Ai::DuoWorkflows::Workflow/{wid}"
    assert (node["statusName"], node["statusGroup"]) == ("finished", "COMPLETED")
    assert node["webUrl"] == f"{project_url}/-/automate/agent-sessions/{wid}"
    assert node["project"] == {"webUrl": project_url}
    checkpoint = node["latestCheckpoint"]
    assert checkpoint["lastDuoMessage"] == {"content": ds.FINAL_ANSWER, "role": None, "messageType": "agent"}
    assert [(m["messageType"], m["role"]) for m in checkpoint["duoMessages"]] == [
        ("user", "user"),
        ("agent", None),
        ("tool", "tool"),
        ("agent", None),
    ]


def test_sample_repository_blobs_document(fresh_standin: Standin) -> None:
    out = data(
        fresh_standin,
        sample("op5_repository_blobs.graphql"),
        {"fullPath": ds.PROJECT_PATH, "ref": "main", "paths": [ds.FILES["readme"], ds.FILES["png"]]},
    )
    project = out["project"]
    assert project["duoContextExclusionSettings"] == {"exclusionRules": ds.EXCLUSION_RULES}
    repo = project["repository"]
    assert repo["rootRef"] == "main"
    assert repo["commit"] == {"sha": ds.COMMITS["main"]}
    assert repo["branchNames"] == sorted(ds.BRANCHES)
    assert (repo["branchCount"], repo["tagCount"]) == (len(ds.BRANCHES), len(ds.TAGS))
    readme, png = repo["blobs"]["nodes"]
    assert readme == {
        "path": "README.md",
        "name": "README.md",
        "size": str(len(ds.README_MAIN)),
        "rawSize": str(len(ds.README_MAIN)),
        "rawTextBlob": ds.README_MAIN,
        "storedExternally": False,
        "externalStorage": None,
    }
    assert png["rawTextBlob"] is None and png["rawSize"] == str(len(content.png_bytes()))


# -- invalid documents ----------------------------------------------------------------------------


def test_invalid_document_is_refused_and_recorded(fresh_standin: Standin) -> None:
    with fresh_standin.expect_invalid() as invalid:
        payload = gql(fresh_standin, 'query Bad { project(fullPath: "grp/sub/proj") { nope } }')
    assert "data" not in payload
    assert payload["errors"] == [
        {
            "message": "Field 'nope' doesn't exist on type 'Project'",
            "locations": [{"line": 1, "column": 49}],
            "path": ["query Bad", "project", "nope"],
            "extensions": {"code": "undefinedField", "typeName": "Project", "fieldName": "nope"},
        }
    ]
    assert [(i["reason"], i["operation_name"]) for i in invalid] == [
        ("invalid document: Field 'nope' doesn't exist on type 'Project'", "Bad")
    ]
    [logged] = fresh_standin.control.requests()
    assert logged["graphql"][0]["valid"] is False and logged["invalid"]


def test_bad_global_id_variable_is_refused_like_gitlab(fresh_standin: Standin) -> None:
    with fresh_standin.expect_invalid():
        payload = gql(fresh_standin, JOBS_PAGE, {"fullPath": ds.PROJECT_PATH, "pipelineId": "1001"})
    [error] = payload["errors"]  # refused before execution: no `data` key
    assert "data" not in payload and "$pipelineId" in error["message"]
    assert error["message"].endswith('"1001" is not a valid Global ID')
    with fresh_standin.expect_invalid():
        payload = gql(
            fresh_standin, JOBS_PAGE, {"fullPath": ds.PROJECT_PATH, "pipelineId": "gid://gitlab/Ci::Build/1"}
        )
    assert "does not represent an instance of Ci::Pipeline" in payload["errors"][0]["message"]


def test_syntax_error_and_missing_query_are_recorded(fresh_standin: Standin) -> None:
    with fresh_standin.expect_invalid() as invalid:
        assert "errors" in gql(fresh_standin, "query { project(")
        response = httpx.post(fresh_standin.graphql_url, content=b"not json", headers=fresh_standin.headers())
        assert response.status_code == 400
        assert gql(fresh_standin, "   ")["errors"] == [{"message": "No query string was present"}]
    assert len(invalid) == 3


# -- paging ---------------------------------------------------------------------------------------


def test_paging_45_jobs_20_at_a_time_yields_45_distinct_ids(fresh_standin: Standin) -> None:
    ids: list[str] = []
    pages: list[int] = []
    after = None
    while True:
        jobs = data(
            fresh_standin,
            JOBS_PAGE,
            {"fullPath": ds.PROJECT_PATH, "pipelineId": PIPELINE_GID, "first": 20, "after": after},
        )["project"]["pipeline"]["jobs"]
        ids += [n["id"] for n in jobs["nodes"]]
        pages.append(len(jobs["nodes"]))
        if not jobs["pageInfo"]["hasNextPage"]:
            break
        after = jobs["pageInfo"]["endCursor"]
    assert pages == [20, 20, 5]
    assert len(set(ids)) == 45 == len(ids)
    assert ids == [f"gid://gitlab/Ci::Build/{i}" for i in ds.BUILD_JOB_IDS]
    assert fresh_standin.control.graphql_requests(operation="JobsPage") == 3


def test_first_is_capped_at_100_and_bad_cursor_is_an_error(fresh_standin: Standin) -> None:
    out = data(
        fresh_standin,
        f'query {{ project(fullPath: "grp/sub/proj") {{ pipeline(id: "{PIPELINE_GID}") {{'
        " jobs(first: 500) { nodes { id } pageInfo { hasNextPage } } } } }",
    )
    assert (
        len(out["project"]["pipeline"]["jobs"]["nodes"]) == 47
    )  # 45 builds + 2 bridges: a large `first` is accepted
    payload = gql(
        fresh_standin,
        JOBS_PAGE,
        {"fullPath": ds.PROJECT_PATH, "pipelineId": PIPELINE_GID, "after": "not-a-cursor"},
    )
    assert payload["errors"][0]["message"] == "Please provide a valid cursor"


def test_failed_job_filter(fresh_standin: Standin) -> None:
    jobs = data(
        fresh_standin,
        JOBS_PAGE,
        {"fullPath": ds.PROJECT_PATH, "pipelineId": PIPELINE_GID, "statuses": ["FAILED"]},
    )["project"]["pipeline"]["jobs"]
    assert [(n["name"], n["allowFailure"]) for n in jobs["nodes"]] == [
        ("rspec 7/30", False),
        ("rspec 21/30", False),
        ("lint", True),
    ]
    assert jobs["pageInfo"] == {"hasNextPage": False, "endCursor": jobs["pageInfo"]["endCursor"]}


# -- auth -----------------------------------------------------------------------------------------


def test_auth_hides_the_private_project(fresh_standin: Standin) -> None:
    query = "query($p: ID!) { project(fullPath: $p) { id } }"
    assert data(fresh_standin, query, {"p": ds.PRIVATE_PROJECT_PATH})["project"] is None
    assert data(fresh_standin, query, {"p": ds.PRIVATE_PROJECT_PATH}, token=ds.BOB_TOKEN)["project"] == {
        "id": f"gid://gitlab/Project/{ds.PRIVATE_PROJECT_ID}"
    }
    # bob sees both downstream pipelines and both bridge links; alice one and one.
    variables = {"fullPath": ds.PROJECT_PATH, "pipelineId": PIPELINE_GID}
    for token, expected in ((ds.ALICE_TOKEN, 1), (ds.BOB_TOKEN, 2)):
        pipeline = data(fresh_standin, PIPELINE_FACETS, variables, token=token)["project"]["pipeline"]
        assert len(pipeline["downstream"]["nodes"]) == expected
        assert sum(1 for b in pipeline["bridgeJobs"]["nodes"] if b["downstreamPipeline"]) == expected
    # REST: 404 for alice, 200 for bob, by path and by id.
    assert fresh_standin.rest("GET", "/projects/grp%2Fprivate-proj").json() == {
        "message": "404 Project Not Found"
    }
    assert fresh_standin.rest("GET", f"/projects/{ds.PRIVATE_PROJECT_ID}").status_code == 404
    assert (
        fresh_standin.rest("GET", f"/projects/{ds.PRIVATE_PROJECT_ID}", token=ds.BOB_TOKEN).status_code == 200
    )


def test_tokens_in_both_headers_anonymous_and_revoked(fresh_standin: Standin) -> None:
    query = "{ currentUser { username } }"
    bearer = httpx.post(
        fresh_standin.graphql_url,
        json={"query": query},
        headers=fresh_standin.headers(ds.CAROL_TOKEN, bearer=True),
    )
    assert bearer.json() == {"data": {"currentUser": {"username": "carol"}}}
    assert data(fresh_standin, query, token=None) == {"currentUser": None}
    revoked = fresh_standin.graphql(query, token=ds.REVOKED_TOKEN)
    assert (revoked.status_code, revoked.json()) == (401, {"errors": [{"message": "Invalid token"}]})
    rest = fresh_standin.rest("GET", "/version", token=ds.REVOKED_TOKEN)
    assert (rest.status_code, rest.json()) == (401, {"message": "401 Unauthorized"})
    assert fresh_standin.rest("GET", "/version", token=None).status_code == 401
    assert fresh_standin.rest("GET", "/version").json()["version"] == "19.4.0-pre"
    # Anonymous callers read public projects only.
    assert fresh_standin.rest("GET", f"/projects/{ds.PUBLIC_PROJECT_ID}", token=None).status_code == 200
    assert fresh_standin.rest("GET", f"/projects/{ds.PROJECT_ID}", token=None).status_code == 404
    log = fresh_standin.control.requests()
    assert [r["auth"] for r in log[:3]] == ["bearer", None, "private-token"]
    assert [r["user"] for r in log[:3]] == ["carol", None, None]
    assert all(t not in json.dumps(log) for t in (ds.ALICE_TOKEN, ds.CAROL_TOKEN, ds.REVOKED_TOKEN))


def test_mutations_refuse_what_the_caller_cannot_change(fresh_standin: Standin) -> None:
    payload = gql(
        fresh_standin, sample("op3a_pipeline_retry.graphql"), {"id": PIPELINE_GID}, token=ds.CAROL_TOKEN
    )
    assert payload["data"] == {"pipelineRetry": None}
    assert payload["errors"][0]["message"].startswith(
        "The resource that you are attempting to access does not exist"
    )
    assert payload["errors"][0]["path"] == ["pipelineRetry"]


# -- mutation errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "error"),
    [
        ("no-such-branch", "Reference not found"),
        (ds.BROKEN_CI_BRANCH, ds.BROKEN_CI_ERROR),
    ],
)
def test_pipeline_create_errors(fresh_standin: Standin, ref: str, error: str) -> None:
    out = data(
        fresh_standin,
        sample("op2_pipeline_create.graphql"),
        {"input": {"projectPath": ds.PROJECT_PATH, "ref": ref}},
    )
    assert out["pipelineCreate"] == {"pipeline": None, "errors": [error]}
    assert fresh_standin.control.pipelines(created=True) == []


def test_retry_and_cancel_errors(fresh_standin: Standin) -> None:
    tag_pipeline = f"gid://gitlab/Ci::Pipeline/{ds.TAG_PIPELINE_ID}"
    retry = data(fresh_standin, sample("op3a_pipeline_retry.graphql"), {"id": tag_pipeline})["pipelineRetry"]
    assert retry["errors"] == ["Pipeline is not retryable"]
    cancel = data(fresh_standin, sample("op3b_pipeline_cancel.graphql"), {"id": tag_pipeline})[
        "pipelineCancel"
    ]
    assert cancel == {"pipeline": None, "errors": ["Pipeline is not cancelable"]}


# -- repository -----------------------------------------------------------------------------------


def blobs(
    standin: Standin, paths: list[str], ref: str = "main", ref_type: str | None = None
) -> dict[str, Any]:
    variables = {"fullPath": ds.PROJECT_PATH, "ref": ref, "paths": paths, "refType": ref_type}
    repository: dict[str, Any] = data(standin, BLOBS, variables)["project"]["repository"]
    return repository


def test_repository_files_have_gitlabs_shapes(fresh_standin: Standin) -> None:
    f = ds.FILES
    paths = [f["mixed"], f["png"], f["lfs"], f["empty"], f["no_newline"], f["crlf"]]
    nodes = {n["path"]: n for n in blobs(fresh_standin, paths)["blobs"]["nodes"]}
    # Alone: with other paths its 20 MiB would pass GitLab's 20 MiB limit for one blobs request.
    nodes.update({n["path"]: n for n in blobs(fresh_standin, [f["truncated"]])["blobs"]["nodes"]})
    mixed = nodes[f["mixed"]]["rawTextBlob"]
    assert mixed.encode("utf-8") == content.mixed_text()
    assert mixed.count("\n") == 5000 and "\r\n" in mixed and "日本語" in mixed and "\u2028" in mixed
    assert nodes[f["png"]]["rawTextBlob"] is None
    lfs = nodes[f["lfs"]]
    assert (lfs["storedExternally"], lfs["externalStorage"], lfs["rawSize"]) == (
        True,
        "lfs",
        str(content.LFS_OBJECT_SIZE),
    )
    truncated = nodes[f["truncated"]]
    assert int(truncated["rawSize"]) == content.TRUNCATED_FULL_SIZE > len(truncated["rawTextBlob"].encode())
    assert not truncated["rawTextBlob"].endswith("\n")
    assert (nodes[f["empty"]]["rawTextBlob"], nodes[f["empty"]]["size"]) == ("", "0")
    assert nodes[f["no_newline"]]["rawTextBlob"] == content.NO_NEWLINE_TEXT
    assert nodes[f["crlf"]]["rawTextBlob"] == content.CRLF_TEXT


def test_ten_mib_file(fresh_standin: Standin) -> None:
    text = blobs(fresh_standin, [ds.FILES["ten_mib"]])["blobs"]["nodes"][0]["rawTextBlob"]
    assert len(text) == content.TEN_MIB
    lines = text.split("\n")
    assert len(lines) - 1 == content.TEN_MIB_LINES > 1_000_500
    assert lines[1_000_000] == "L1000001"


def test_missing_file_and_missing_ref(fresh_standin: Standin) -> None:
    missing_file = blobs(fresh_standin, ["no/such/file.txt"])
    assert missing_file == {"blobs": {"nodes": []}, "commit": {"sha": ds.COMMITS["main"]}}
    missing_ref = blobs(fresh_standin, [ds.FILES["readme"]], ref="no-such-ref")
    assert missing_ref == {"blobs": {"nodes": []}, "commit": None}
    payload = gql(
        fresh_standin, BLOBS, {"fullPath": ds.PROJECT_PATH, "ref": "refs/heads/main", "paths": ["README.md"]}
    )
    assert payload["errors"][0]["message"] == "Ref is not valid"


def test_refs_with_slashes_tags_shas_and_ref_type(fresh_standin: Standin) -> None:
    x = ds.FILES["x_rb"]
    assert blobs(fresh_standin, [x], "my-topic/with-slash")["blobs"]["nodes"][0]["rawTextBlob"] == ds.x_rb(
        "my-topic/with-slash"
    )
    assert (
        blobs(fresh_standin, [ds.FEATURE_ONLY_FILE], "feature")["blobs"]["nodes"][0]["path"]
        == ds.FEATURE_ONLY_FILE
    )
    assert blobs(fresh_standin, [ds.FEATURE_ONLY_FILE], "main")["blobs"]["nodes"] == []
    assert blobs(fresh_standin, ["README.md"], "v1.0")["blobs"]["nodes"][0]["rawTextBlob"] == ds.README_V1
    assert blobs(fresh_standin, ["README.md"], "HEAD")["commit"]["sha"] == ds.COMMITS["main"]
    for sha in (ds.COMMITS["feature"], ds.COMMITS["feature"][:8]):
        assert (
            blobs(fresh_standin, ["README.md"], sha)["blobs"]["nodes"][0]["rawTextBlob"] == ds.README_FEATURE
        )
    readme = "README.md"
    assert (
        blobs(fresh_standin, [readme], "release", "HEADS")["blobs"]["nodes"][0]["rawTextBlob"]
        == ds.README_RELEASE_BRANCH
    )
    assert (
        blobs(fresh_standin, [readme], "release", "TAGS")["blobs"]["nodes"][0]["rawTextBlob"]
        == ds.README_RELEASE_TAG
    )


def test_committing_moves_the_branch(fresh_standin: Standin) -> None:
    sha = fresh_standin.control.commit_file(ds.PROJECT_PATH, "README.md", "changed\n")
    assert sha != ds.COMMITS["main"]
    repo = blobs(fresh_standin, ["README.md"])
    assert (repo["commit"]["sha"], repo["blobs"]["nodes"][0]["rawTextBlob"]) == (sha, "changed\n")
    old = blobs(fresh_standin, ["README.md"], ds.COMMITS["main"])["blobs"]["nodes"][0]["rawTextBlob"]
    assert old == ds.README_MAIN


def test_rest_branches_tags_project_and_double_encoding(fresh_standin: Standin) -> None:
    enc = ds.PROJECT_PATH_ENCODED
    names = [
        b["name"]
        for b in fresh_standin.rest(
            "GET", f"/projects/{enc}/repository/branches", params={"search": "^feature"}
        ).json()
    ]
    assert names == ["feature", "feature/other"]
    tags = fresh_standin.rest("GET", f"/projects/{ds.PROJECT_ID}/repository/tags", params={"search": "v1"})
    assert [(t["name"], t["target"]) for t in tags.json()] == [("v1.0", ds.COMMITS["initial"])]
    assert tags.headers["X-Total"] == "1"
    project = fresh_standin.rest("GET", f"/projects/{enc}").json()
    assert (project["id"], project["path_with_namespace"], project["default_branch"]) == (
        ds.PROJECT_ID,
        ds.PROJECT_PATH,
        "main",
    )
    branch = fresh_standin.rest("GET", f"/projects/{enc}/repository/branches/my-topic%2Fwith-slash").json()
    assert branch["commit"]["id"] == ds.COMMITS["my-topic/with-slash"]
    with fresh_standin.expect_invalid() as invalid:
        assert fresh_standin.rest("GET", "/projects/grp%252Fsub%252Fproj").status_code == 404
    assert "encoded twice" in invalid[0]["reason"]
    routes = [r["route"] for r in fresh_standin.control.requests()]
    assert routes[:3] == [
        "GET /projects/:id/repository/branches",
        "GET /projects/:id/repository/tags",
        "GET /projects/:id",
    ]


# -- Duo workflows --------------------------------------------------------------------------------


def workflow(standin: Standin, wid: int, token: str = ds.ALICE_TOKEN) -> dict[str, Any]:
    return gql(
        standin, WORKFLOW, {"workflowId": f"gid://gitlab/Ai::DuoWorkflows::Workflow/{wid}"}, token=token
    )


@pytest.mark.parametrize(
    ("state", "group"),
    [
        ("running", "ACTIVE"),
        ("created", "ACTIVE"),
        ("finished", "COMPLETED"),
        ("input_required", "AWAITING_INPUT"),
        ("tool_call_approval_required", "AWAITING_INPUT"),
        ("plan_approval_required", "AWAITING_INPUT"),
        ("paused", "PAUSED"),
        ("failed", "FAILED"),
        ("stopped", "CANCELED"),
    ],
)
def test_one_workflow_per_state(fresh_standin: Standin, state: str, group: str) -> None:
    [node] = workflow(fresh_standin, ds.WORKFLOWS[state])["data"]["duoWorkflowWorkflows"]["nodes"]
    assert (node["statusName"], node["statusGroup"]) == (state, group)
    assert (node["latestCheckpoint"] is None) == (state == "created")


def test_unreadable_workflow(fresh_standin: Standin) -> None:
    wid = ds.WORKFLOWS["private"]
    payload = workflow(fresh_standin, wid)
    assert payload["data"] is None
    assert payload["errors"][0]["message"].startswith("The resource that you are attempting to access")
    assert workflow(fresh_standin, 999_999)["errors"] == payload["errors"]
    assert (
        workflow(fresh_standin, wid, token=ds.BOB_TOKEN)["data"]["duoWorkflowWorkflows"]["nodes"][0][
            "statusName"
        ]
        == "finished"
    )
    fresh_standin.control.settings(duo_not_found="empty")
    assert workflow(fresh_standin, wid) == {"data": {"duoWorkflowWorkflows": {"nodes": []}}}


def test_workflow_walk_through_states(fresh_standin: Standin) -> None:
    wid = ds.WORKFLOWS["running"]
    fresh_standin.control.script_workflow(
        wid,
        [
            {"status": "running"},
            {
                "status": "tool_call_approval_required",
                "append_messages": [{"content": "Run tests?", "message_type": "request"}],
            },
            {"status": "running"},
            {"status": "finished", "append_messages": ["All green now."]},
        ],
    )
    seen = []
    for _ in range(5):
        node = workflow(fresh_standin, wid)["data"]["duoWorkflowWorkflows"]["nodes"][0]
        seen.append((node["statusName"], node["latestCheckpoint"]["lastDuoMessage"]["content"]))
    assert [s for s, _ in seen] == [
        "running",
        "tool_call_approval_required",
        "running",
        "finished",
        "finished",
    ]
    assert seen[1][1] == "Run tests?" and seen[3][1] == "All green now."
    fresh_standin.control.update_workflow(
        wid, status="failed", messages=[{"content": "boom", "message_type": "agent", "role": "assistant"}]
    )
    node = workflow(fresh_standin, wid)["data"]["duoWorkflowWorkflows"]["nodes"][0]
    assert node["statusGroup"] == "FAILED"
    assert node["latestCheckpoint"]["duoMessages"] == [
        {"content": "boom", "role": "assistant", "messageType": "agent"}
    ]
    with pytest.raises(StandinControlError, match="status must be one of"):
        fresh_standin.control.update_workflow(wid, status="exploded")


def test_scheduled_workflow_change(fresh_standin: Standin) -> None:
    wid = ds.WORKFLOWS["running"]
    fresh_standin.control.update_workflow(wid, status="finished", after_seconds=0.2)
    assert fresh_standin.control.workflow(wid)["status"] == "RUNNING"
    deadline = time.monotonic() + 5
    while fresh_standin.control.workflow(wid)["status"] != "FINISHED":
        assert time.monotonic() < deadline
        time.sleep(0.05)


# -- faults and the request log -------------------------------------------------------------------


def test_rate_limit_then_success(fresh_standin: Standin) -> None:
    fresh_standin.control.rate_limit(retry_after=2, count=1, match={"path": "/api/graphql"})
    first = fresh_standin.graphql("{ currentUser { username } }")
    assert first.status_code == 429
    assert (
        first.headers["Retry-After"] == "2"
        and first.headers["RateLimit-Name"] == "throttle_authenticated_api"
    )
    assert first.text == "Retry later\n"
    assert fresh_standin.graphql("{ currentUser { username } }").status_code == 200
    log = fresh_standin.control.requests()
    assert [(r["status"], r["fault"]) for r in log] == [(429, "rate_limit"), (200, None)]
    assert fresh_standin.control.graphql_requests(field="currentUser") == 2


def test_other_faults(fresh_standin: Standin) -> None:
    c = fresh_standin.control
    c.fail(502, count=1)
    failed = fresh_standin.rest("GET", "/version")
    assert (failed.status_code, failed.json()) == (502, {"message": "502 Bad Gateway"})
    c.html_page(count=1)
    page = fresh_standin.graphql("{ currentUser { username } }")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "Sign in · GitLab" in page.text
    c.drop(count=1)
    with pytest.raises(httpx.RemoteProtocolError):
        fresh_standin.rest("GET", "/version")
    c.delay(0.3, count=1)
    started = time.monotonic()
    assert fresh_standin.rest("GET", "/version").status_code == 200
    assert time.monotonic() - started >= 0.3
    c.add_fault("graphql_error", body="Internal server error", count=1)
    assert fresh_standin.graphql("{ currentUser { id } }").json() == {
        "errors": [{"message": "Internal server error"}]
    }
    assert fresh_standin.rest("GET", "/version").status_code == 200  # faults used up
    assert [f["count"] for f in c.faults()] == [0, 0, 0, 0, 0]


def test_reset_partial_data_and_trickle(fresh_standin: Standin) -> None:
    c = fresh_standin.control
    c.reset_connection(count=1)
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        fresh_standin.rest("GET", "/version")
    c.graphql_partial("Request timed out", count=1)
    partial = fresh_standin.graphql("{ currentUser { username } }").json()
    assert partial["data"] == {"currentUser": {"username": "alice"}}
    assert partial["errors"][0]["message"] == "Request timed out"
    assert partial["errors"][0]["path"] == ["currentUser"]
    c.trickle(0.05, chunk=8, count=1)
    started = time.monotonic()
    trickled = fresh_standin.rest("GET", "/version")
    assert trickled.status_code == 200 and trickled.json()["version"]
    assert time.monotonic() - started >= 0.05 * (len(trickled.content) // 8)
    assert [f["count"] for f in c.faults()] == [0, 0, 0]


def test_fault_after_processing_applies_the_mutation(fresh_standin: Standin) -> None:
    fresh_standin.control.drop(match={"field": "pipelineCreate"}, phase="after")
    assert fresh_standin.graphql("{ currentUser { id } }").status_code == 200  # not matched
    with pytest.raises(httpx.RemoteProtocolError):
        fresh_standin.graphql(
            sample("op2_pipeline_create.graphql"), {"input": {"projectPath": ds.PROJECT_PATH, "ref": "main"}}
        )
    assert [p["id"] for p in fresh_standin.control.pipelines(created=True)] == [ds.FIRST_CREATED_PIPELINE_ID]


def test_request_log_counts_and_clears(fresh_standin: Standin) -> None:
    c = fresh_standin.control
    assert c.request_count() == 0
    data(fresh_standin, JOBS_PAGE, {"fullPath": ds.PROJECT_PATH, "pipelineId": PIPELINE_GID, "first": 5})
    [entry] = c.requests()
    assert entry["method"] == "POST" and entry["path"] == "/api/graphql" and entry["status"] == 200
    [op] = entry["graphql"]
    assert (op["operation_name"], op["operation_type"], op["fields"]) == ("JobsPage", "query", ["project"])
    assert op["variables"] == {"fullPath": ds.PROJECT_PATH, "pipelineId": PIPELINE_GID, "first": 5}
    assert "project.pipeline.jobs.nodes.stage.name" in op["paths"] and op["unserved"] == []
    assert (
        c.request_count() == 1
        and c.graphql_requests() == 1
        and c.graphql_requests(field="pipelineCreate") == 0
    )
    c.clear_requests()
    assert c.requests() == [] and c.request_count() == 0


def test_unserved_fields_and_paths_are_reported(fresh_standin: Standin) -> None:
    out = gql(fresh_standin, '{ project(fullPath: "grp/sub/proj") { id mergeRequestsEnabled } }')
    assert out["data"]["project"] == {
        "id": f"gid://gitlab/Project/{ds.PROJECT_ID}",
        "mergeRequestsEnabled": None,
    }
    assert fresh_standin.control.requests()[0]["graphql"][0]["unserved"] == ["Project.mergeRequestsEnabled"]
    missing = httpx.get(
        f"{fresh_standin.url}/api/v4/projects/{ds.PROJECT_ID}/issues", headers=fresh_standin.headers()
    )
    assert missing.status_code == 404
    assert fresh_standin.control.requests()[-1]["unserved"] is True


def test_control_api_refuses_bad_input(fresh_standin: Standin) -> None:
    with pytest.raises(StandinControlError, match="kind must be one of"):
        fresh_standin.control.add_fault("explode")
    with pytest.raises(StandinControlError, match="404: not found: pipeline 1"):
        fresh_standin.control.pipeline(1)
    assert fresh_standin.control.dataset()["PIPELINE_ID"] == ds.PIPELINE_ID


async def test_async_control(fresh_standin: Standin) -> None:
    await fresh_standin.acontrol.update_workflow(ds.WORKFLOWS["running"], status="finished")
    assert (await fresh_standin.acontrol.workflow(ds.WORKFLOWS["running"]))["status"] == "FINISHED"


# -- sub-path -------------------------------------------------------------------------------------


def test_subpath_mode(fresh_standin_subpath: Standin) -> None:
    s = fresh_standin_subpath
    assert s.url.endswith("/gitlab")
    out = data(
        s, sample("op1_pipeline_jobs.graphql"), {"fullPath": ds.PROJECT_PATH, "pipelineId": PIPELINE_GID}
    )
    assert out["project"]["webUrl"] == f"{s.url}/{ds.PROJECT_PATH}"
    assert out["project"]["pipeline"]["path"] == f"/gitlab/{ds.PROJECT_PATH}/-/pipelines/{ds.PIPELINE_ID}"
    assert out["project"]["pipeline"]["jobs"]["nodes"][0]["webPath"].startswith("/gitlab/")
    assert s.rest("GET", f"/projects/{ds.PROJECT_ID}").json()["web_url"] == f"{s.url}/{ds.PROJECT_PATH}"
    root = httpx.post(f"{s.root}/api/graphql", json={"query": "{ currentUser { id } }"}, headers=s.headers())
    assert root.status_code == 404
    assert s.control.requests()[-1]["unserved"] is True


def test_base64_file_commit_is_binary(fresh_standin: Standin) -> None:
    fresh_standin.control.commit_file(
        ds.PROJECT_ID, "bin/data.bin", base64=base64.b64encode(b"\x00\xff").decode()
    )
    node = blobs(fresh_standin, ["bin/data.bin"])["blobs"]["nodes"][0]
    assert (node["rawTextBlob"], node["size"]) == (None, "2")


def test_projects_by_global_id(fresh_standin: Standin) -> None:
    query = "query($ids: [ID!]) { projects(ids: $ids, first: 1) { nodes { id fullPath } } }"
    ids = [f"gid://gitlab/Project/{ds.PRIVATE_PROJECT_ID}", f"gid://gitlab/Project/{ds.PROJECT_ID}"]
    assert data(fresh_standin, query, {"ids": ids})["projects"]["nodes"] == [
        {"id": f"gid://gitlab/Project/{ds.PROJECT_ID}", "fullPath": ds.PROJECT_PATH}
    ]
    assert gql(fresh_standin, query, {"ids": ["42"]})["errors"][0]["message"] == "42 is not a valid Global ID"


def test_query_depth_is_limited_like_gitlab(fresh_standin: Standin) -> None:
    def nested(levels: int) -> str:
        inner = "id"
        for _ in range(levels):
            inner = f"upstream {{ {inner} }}"
        return (
            f'{{ project(fullPath: "{ds.PROJECT_PATH}") {{ pipeline(id: "{PIPELINE_GID}") {{ {inner} }} }} }}'
        )

    assert data(fresh_standin, nested(17))["project"]["pipeline"]["upstream"] is None  # depth 20: allowed
    with fresh_standin.expect_invalid():
        payload = gql(fresh_standin, nested(18))
    assert payload == {"errors": [{"message": "Query has depth of 21, which exceeds max depth of 20"}]}
