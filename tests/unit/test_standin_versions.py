"""The stand-in answering as an older GitLab, or GitLab CE, in process.

What a gateway meets on such an instance: graphql-ruby's validation errors (its wording,
``extensions.code``, several in one answer, HTTP 200, no ``data``, nothing run), ``metadata`` and
``GET /version`` naming the version and edition, REST routes GitLab did not have yet answering 404,
and the REST pipeline create that GitLab offers before ``pipelineCreate``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aiohttp import web

from tests.gitlab.band_schema import SCHEMA_FILE
from tests.gitlab.versions import Edition
from tests.standin import dataset as ds
from tests.standin.graphql_api import GraphQLEndpoint, load_band_schema
from tests.standin.server import create_app

ALICE = {"PRIVATE-TOKEN": ds.ALICE_TOKEN}
BY_ID = '{ project(fullPath: "grp/sub/proj") { pipeline(id: "gid://gitlab/Ci::Pipeline/1001") { id } } }'
# One document holding three mutations, as the gateway sent before it split them: GitLab validates
# the whole document, so one mutation's missing field refuses the others too (and runs none).
MUTATIONS = """
fragment SavedPipeline on Pipeline { id status ref path project { fullPath webUrl } }
mutation PipelineCreate($input: PipelineCreateInput!) {
  pipelineCreate(input: $input) { pipeline { ...SavedPipeline } errors }
}
mutation PipelineRetry($id: CiPipelineID!) {
  pipelineRetry(input: {id: $id}) { pipeline { ...SavedPipeline } errors }
}
mutation PipelineCancel($id: CiPipelineID!) {
  pipelineCancel(input: {id: $id}) { pipeline { ...SavedPipeline } errors }
}
"""


@cache
def _schema(version: str, edition: Edition) -> Any:
    return load_band_schema(version, edition, SCHEMA_FILE)


def app(version: str, edition: Edition) -> web.Application:
    return create_app(GraphQLEndpoint(_schema(version, edition)), gitlab=(version, edition))


async def test_validation_errors_are_graphql_rubys_and_run_nothing(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app("16.11", "ee"))
    pipeline_gid = f"gid://gitlab/Ci::Pipeline/{ds.PIPELINE_ID}"
    response = await client.post(
        "/api/graphql",
        json={"query": MUTATIONS, "operationName": "PipelineRetry", "variables": {"id": pipeline_gid}},
        headers=ALICE,
    )
    assert response.status == 200
    answer = await response.json()
    assert "data" not in answer
    assert [(e["message"], e["extensions"]["code"]) for e in answer["errors"]] == [
        ("PipelineCreateInput isn't a defined input type (on $input)", "variableRequiresValidType"),
        ("Field 'pipelineCreate' doesn't exist on type 'Mutation'", "undefinedField"),
        ("Field 'pipeline' doesn't exist on type 'PipelineCancelPayload'", "undefinedField"),
    ]
    assert answer["errors"][1]["path"] == ["mutation PipelineCreate", "pipelineCreate"]
    state = await (await client.get(f"/_standin/pipelines/{ds.PIPELINE_ID}")).json()
    assert state["status"] == "FAILED"  # the retry was never run

    answer = await (await client.post("/api/graphql", json={"query": BY_ID}, headers=ALICE)).json()
    assert answer == {
        "errors": [
            {
                "message": "Field 'pipeline' doesn't accept argument 'id'",
                "locations": [{"line": 1, "column": 48}],
                "path": ["query", "project", "pipeline", "id"],
                "extensions": {
                    "code": "argumentNotAccepted",
                    "name": "pipeline",
                    "typeName": "Field",
                    "argumentName": "id",
                },
            }
        ]
    }


async def test_metadata_and_version_name_the_band(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app("17.11", "ce"))
    query = {"query": "{ metadata { version enterprise } }"}
    metadata = await (await client.post("/api/graphql", json=query, headers=ALICE)).json()
    assert metadata == {"data": {"metadata": {"version": "17.11.0", "enterprise": False}}}
    rest = await (await client.get("/api/v4/version", headers=ALICE)).json()
    assert (rest["version"], rest["enterprise"]) == ("17.11.0", False)
    duo = {"query": "{ duoWorkflowWorkflows { nodes { id } } }"}
    refused = await (await client.post("/api/graphql", json=duo, headers=ALICE)).json()
    assert refused["errors"][0]["message"] == "Field 'duoWorkflowWorkflows' doesn't exist on type 'Query'"
    # A reset keeps the band.
    await client.post("/_standin/reset")
    rest = await (await client.get("/api/v4/metadata", headers=ALICE)).json()
    assert rest["version"] == "17.11.0"


async def test_routes_gitlab_did_not_have_yet_answer_404(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app("16.11", "ee"))
    tree = f"/api/v4/projects/{ds.PROJECT_ID}/jobs/5024/artifacts/tree"
    response = await client.get(tree, headers=ALICE)
    assert response.status == 404
    # The control API moves the stand-in to another GitLab (its schema too).
    settings = await (
        await client.patch("/_standin/settings", json={"gitlab_version": "18.8", "gitlab_edition": "ee"})
    ).json()
    assert (settings["version"], settings["artifacts_tree"]) == ("18.8.0-ee", True)
    listed = await (await client.get(tree, headers=ALICE, params={"recursive": "true"})).json()
    assert {e["path"] for e in listed} >= {"coverage/", "coverage/index.html"}
    await client.patch("/_standin/settings", json={"artifacts_tree_recursive": "children"})
    one_level = await (await client.get(tree, headers=ALICE, params={"recursive": "true"})).json()
    assert "coverage/" in {e["path"] for e in one_level}
    assert all(e["path"].count("/") == (1 if e["type"] == "directory" else 0) for e in one_level)
    query = {"query": BY_ID}
    accepted = await (await client.post("/api/graphql", json=query, headers=ALICE)).json()
    assert accepted == {"data": {"project": {"pipeline": {"id": "gid://gitlab/Ci::Pipeline/1001"}}}}


async def test_rest_pipeline_create(aiohttp_client: Any) -> None:
    client = await aiohttp_client(app("16.11", "ee"))
    route = f"/api/v4/projects/{ds.PROJECT_PATH_ENCODED}/pipeline"
    body = {"ref": "main", "variables": [{"key": "DEPLOY", "value": "1", "variable_type": "env_var"}]}
    created = await client.post(route, json=body, headers=ALICE)
    assert created.status == 201
    pipeline = await created.json()
    assert (pipeline["id"], pipeline["status"], pipeline["ref"]) == (
        ds.FIRST_CREATED_PIPELINE_ID,
        "created",
        "main",
    )
    stored = await (await client.get(f"/_standin/pipelines/{pipeline['id']}")).json()
    assert stored["variables"] == [{"key": "DEPLOY", "value": "1", "variableType": "ENV_VAR"}]
    missing = await client.post(route, json={"ref": "nope"}, headers=ALICE)
    assert (missing.status, await missing.json()) == (400, {"message": {"base": ["Reference not found"]}})
    reporter = await client.post(route, json={"ref": "main"}, headers={"PRIVATE-TOKEN": ds.CAROL_TOKEN})
    assert (reporter.status, await reporter.json()) == (403, {"message": "403 Forbidden"})
