"""The stand-in's job retry (``POST /projects/:id/jobs/:job_id/retry``) and repository tree
(``GET /projects/:id/repository/tree``) answer as GitLab documents them
(https://docs.gitlab.com/api/jobs/#retry-a-job, https://docs.gitlab.com/api/repositories/#list-repository-tree)."""

from __future__ import annotations

from functools import cache
from typing import Any
from urllib.parse import quote

from tests.conftest import GITLAB_SCHEMA
from tests.standin import dataset as ds
from tests.standin.graphql_api import GraphQLEndpoint, load_schema
from tests.standin.job_logs import FAILED_LOG_JOB_ID, RUNNING_LOG_JOB_ID
from tests.standin.server import create_app

P = quote(ds.PROJECT_PATH, safe="")


@cache
def endpoint() -> GraphQLEndpoint:
    return GraphQLEndpoint(load_schema(GITLAB_SCHEMA))


async def test_a_failed_job_is_retried_once_as_a_new_pending_job(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app(endpoint()))
    alice = {"PRIVATE-TOKEN": ds.ALICE_TOKEN}
    answer = await client.post(f"/api/v4/projects/{P}/jobs/{FAILED_LOG_JOB_ID}/retry", headers=alice)
    assert answer.status == 201
    new = await answer.json()
    assert new["id"] != FAILED_LOG_JOB_ID and new["status"] == "pending" and new["name"] == "rspec 7/30"
    again = await client.post(f"/api/v4/projects/{P}/jobs/{FAILED_LOG_JOB_ID}/retry", headers=alice)
    assert again.status == 403 and "not retryable" in (await again.json())["message"]
    running = await client.post(f"/api/v4/projects/{P}/jobs/{RUNNING_LOG_JOB_ID}/retry", headers=alice)
    assert running.status in (403, 404)
    carol = {"PRIVATE-TOKEN": ds.CAROL_TOKEN}  # a Reporter may read jobs, not retry them
    refused = await client.post(f"/api/v4/projects/{P}/jobs/{new['id']}/retry", headers=carol)
    assert refused.status in (403, 404)


async def test_the_tree_lists_a_folder_or_everything_below_it_in_pages(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app(endpoint()))
    alice = {"PRIVATE-TOKEN": ds.ALICE_TOKEN}
    root = await (await client.get(f"/api/v4/projects/{P}/repository/tree", headers=alice)).json()
    kinds = [e["type"] for e in root]
    assert kinds == sorted(kinds, key=lambda k: k != "tree")  # folders first
    assert all("/" not in e["path"] for e in root)
    everything = await (
        await client.get(
            f"/api/v4/projects/{P}/repository/tree",
            params={"recursive": "true", "per_page": "100"},
            headers=alice,
        )
    ).json()
    assert any("/" in e["path"] for e in everything) and len(everything) > len(root)
    folder = next(e["path"] for e in root if e["type"] == "tree")
    inside = await (
        await client.get(f"/api/v4/projects/{P}/repository/tree", params={"path": folder}, headers=alice)
    ).json()
    assert inside and all(e["path"].startswith(folder + "/") for e in inside)
    missing = await client.get(f"/api/v4/projects/{P}/repository/tree", params={"ref": "nope"}, headers=alice)
    assert missing.status == 404 and (await missing.json())["message"] == "404 Tree Not Found"
    none = await client.get(
        f"/api/v4/projects/{P}/repository/tree", params={"path": "no/such"}, headers=alice
    )
    assert none.status == 200 and await none.json() == []
