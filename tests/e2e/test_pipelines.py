"""``get_pipeline`` and the superseded pipeline tools end to end: the gateway process against the
GitLab stand-in, driven by the official ``mcp`` SDK client.

The stand-in (``tests/standin/README.md``) validates every GraphQL document against GitLab's
complete schema and executes it; its pipeline 1001 in ``grp/sub/proj`` has 45 build jobs (3
failed), 2 bridges and 2 downstream pipelines, one of them in ``grp/private-proj``, which the
default caller (alice) cannot read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bench.translator import make_app
from tests.e2e.harness import GatewayProcess, mcp_client
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

TOOLS = {
    "get_pipeline",
    "get_pipeline_jobs",
    "get_pipeline_failing_jobs",
    "get_downstream_pipelines",
    "get_failing_bridge_jobs",
}


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway for the module (service mode, alice's token), against the session's stand-in."""
    state = tmp_path_factory.mktemp("gateway") / "state"
    proc = GatewayProcess(env={**standin.env(), "GATEWAY_TOOLSETS": "all"}, state_dir=state).start()
    yield proc
    proc.stop()


async def call(gateway: GatewayProcess, name: str, arguments: dict[str, Any]) -> Any:
    async with mcp_client(gateway.mcp_url) as client:
        return await client.call_tool(name, arguments)


def structured(result: Any) -> dict[str, Any]:
    """The success payload; its JSON text block says the same."""
    assert not result.is_error, result.content
    assert json.loads(result.content[-1].text) == result.structured_content
    return dict(result.structured_content)


def failure(result: Any) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    err = dict(result.structured_content["error"])
    assert result.content[0].text == err["message"]
    return err


def pipeline_args(**extra: Any) -> dict[str, Any]:
    return {"id": ds.PROJECT_PATH, "pipeline_id": ds.PIPELINE_ID, **extra}


async def test_tools_are_listed_with_their_schemas(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) >= TOOLS
    tool = listed["get_pipeline"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
    # Named by url, or by project_id and pipeline_id: neither way is required on its own.
    assert "required" not in tool.input_schema
    assert {"url", "project_id", "pipeline_id"} <= set(tool.input_schema["properties"])
    assert tool.output_schema is not None and "page_info" in tool.output_schema["properties"]
    assert fresh_standin.control.request_count() == 0  # listing tools never calls GitLab


async def test_page_through_all_45_jobs_20_at_a_time(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    ids: list[int] = []
    sizes: list[int] = []
    args = pipeline_args(include=["jobs"], first=20)
    async with mcp_client(gateway.mcp_url) as client:
        while True:
            out = structured(await client.call_tool("get_pipeline", args))
            assert set(out) == {"id", "status", "ref", "sha", "source", "web_url", "jobs", "page_info"}
            sizes.append(len(out["jobs"]))
            ids += [job["id"] for job in out["jobs"]]
            if not out["page_info"]["has_next_page"]:
                break
            args = {**args, "after": out["page_info"]["end_cursor"]}
    assert sizes == [20, 20, 5]
    assert len(ids) == len(set(ids)) == 45
    assert sorted(ids) == ds.BUILD_JOB_IDS
    assert out["id"] == ds.PIPELINE_ID and out["status"] == "failed"
    assert out["web_url"] == f"{fresh_standin.url}/{ds.PROJECT_PATH}/-/pipelines/{ds.PIPELINE_ID}"
    assert fresh_standin.control.graphql_requests(operation="getPipeline") == 3  # one request per call


@pytest.mark.parametrize("tool", ["get_pipeline", "get_pipeline_jobs"])
async def test_a_cursor_gitlab_refuses_is_a_bad_after(
    gateway: GatewayProcess, fresh_standin: Standin, tool: str
) -> None:
    extra: dict[str, Any] = {"include": ["jobs"]} if tool == "get_pipeline" else {}
    err = failure(await call(gateway, tool, pipeline_args(after="garbage", **extra)))
    assert err["reason"] == "bad_request" and err["invalid_arguments"] == ["after"]
    assert err["message"].startswith(
        "`after` is not a cursor GitLab accepts: pass `page_info.end_cursor` from the previous page"
    )
    assert fresh_standin.control.graphql_requests(operation="getPipeline") == 1  # not retried


async def test_the_gateway_runs_on_uvloop_and_on_asyncio_with_the_switch_off(
    gateway: GatewayProcess, fresh_standin: Standin, start_gateway: Callable[..., GatewayProcess]
) -> None:
    """Every other test here runs on the default loop (uvloop); the switch turns it off."""
    assert "event_loop=uvloop" in gateway.log()
    off = start_gateway(env={**fresh_standin.env(), "GATEWAY_SERVER__EVENT_LOOP": "asyncio"})
    assert "event_loop=asyncio" in off.log()
    out = structured(await call(off, "get_pipeline", pipeline_args()))
    assert out["id"] == ds.PIPELINE_ID and out["status"] == "failed"


async def test_failed_jobs(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    out = structured(
        await call(gateway, "get_pipeline", pipeline_args(include=["jobs"], job_status="failed"))
    )
    assert [j["id"] for j in out["jobs"]] == ds.FAILED_JOB_IDS
    assert [j["name"] for j in out["jobs"]] == ds.FAILED_JOB_NAMES
    assert {j["status"] for j in out["jobs"]} == {"failed"}
    assert out["page_info"]["has_next_page"] is False
    legacy = structured(await call(gateway, "get_pipeline_failing_jobs", pipeline_args()))
    assert legacy == out


async def test_bridges_one_with_a_null_downstream(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    out = structured(await call(gateway, "get_pipeline", pipeline_args(include=["bridge_jobs"])))
    assert set(out) == {"id", "status", "ref", "sha", "source", "web_url", "bridge_jobs", "page_info"}
    bridges = {b["id"]: b for b in out["bridge_jobs"]}
    assert set(bridges) == {ds.BRIDGE_CHILD_JOB_ID, ds.BRIDGE_PRIVATE_JOB_ID}
    child = bridges[ds.BRIDGE_CHILD_JOB_ID]["downstream_pipeline"]
    assert child["id"] == ds.CHILD_PIPELINE_ID and child["project_full_path"] == ds.PROJECT_PATH
    assert child["status"] == "failed" and child["source"] == "parent_pipeline"
    assert bridges[ds.BRIDGE_PRIVATE_JOB_ID]["downstream_pipeline"] is None  # alice cannot read it
    failing = structured(await call(gateway, "get_failing_bridge_jobs", pipeline_args()))
    assert [b["id"] for b in failing["bridge_jobs"]] == [ds.BRIDGE_CHILD_JOB_ID]


async def test_downstream_pipelines(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    out = structured(await call(gateway, "get_pipeline", pipeline_args(include=["downstream_pipelines"])))
    assert [p["id"] for p in out["downstream_pipelines"]] == [ds.CHILD_PIPELINE_ID]
    assert out["downstream_pipelines"][0]["web_url"] == (
        f"{fresh_standin.url}/{ds.PROJECT_PATH}/-/pipelines/{ds.CHILD_PIPELINE_ID}"
    )
    url = f"{fresh_standin.url}/{ds.PROJECT_PATH}/-/pipelines/{ds.PIPELINE_ID}"
    assert structured(await call(gateway, "get_downstream_pipelines", {"url": url})) == out


@pytest.mark.parametrize("project", [ds.PROJECT_PATH_ENCODED, str(ds.PROJECT_ID)])
async def test_encoded_path_and_numeric_id(
    gateway: GatewayProcess, fresh_standin: Standin, project: str
) -> None:
    out = structured(await call(gateway, "get_pipeline", {"id": project, "pipeline_id": ds.PIPELINE_ID}))
    assert out["id"] == ds.PIPELINE_ID
    assert fresh_standin.control.graphql_requests() == 1


async def test_missing_project(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    err = failure(await call(gateway, "get_pipeline", {"id": "grp/nope", "pipeline_id": ds.PIPELINE_ID}))
    assert err["reason"] == "not_found"
    assert err["message"].startswith("Project 'grp/nope' not found or inaccessible.")
    err = failure(
        await call(
            gateway, "get_pipeline", {"id": ds.PRIVATE_PROJECT_PATH, "pipeline_id": ds.PRIVATE_PIPELINE_ID}
        )
    )
    assert err["message"].startswith(f"Project '{ds.PRIVATE_PROJECT_PATH}' not found or inaccessible.")


async def test_missing_pipeline(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    err = failure(await call(gateway, "get_pipeline", pipeline_args(pipeline_id=999999)))
    assert err["reason"] == "not_found"
    assert err["message"].startswith(
        f"Pipeline 999999 not found or inaccessible in project '{ds.PROJECT_PATH}'."
    )


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (pipeline_args(pipeline_id="../../user"), "`pipeline_id`: must be a positive integer"),
        (pipeline_args(pipeline_id=-1), "`pipeline_id`: must be a positive integer"),
        (pipeline_args(first=0), "`first`"),
        (pipeline_args(first=101), "`first`"),
        (pipeline_args(include=["artifacts"]), 'unknown facet "artifacts"'),
        (pipeline_args(include=["jobs", "bridge_jobs"]), "at most one facet per call"),
        (pipeline_args(job_status="failed"), "filters the jobs facet only"),
        (pipeline_args(ref="main"), "unknown argument `ref`"),
    ],
)
async def test_bad_input_never_reaches_gitlab(
    gateway: GatewayProcess, fresh_standin: Standin, arguments: dict[str, Any], says: str
) -> None:
    err = failure(await call(gateway, "get_pipeline", arguments))
    assert err["reason"] == "bad_request"
    assert says in err["message"]
    assert fresh_standin.control.request_count() == 0


async def test_rate_limited_once_then_served(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    fresh_standin.control.rate_limit(retry_after=1, count=1)
    out = structured(await call(gateway, "get_pipeline", pipeline_args()))
    assert out["id"] == ds.PIPELINE_ID
    assert fresh_standin.control.graphql_requests() == 2


async def test_rate_limited_past_the_budget(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    fresh_standin.control.rate_limit(retry_after=60, count=None)
    err = failure(await call(gateway, "get_pipeline", pipeline_args()))
    assert err["reason"] == "rate_limited"
    assert err["retry_after_seconds"] == 60


async def test_html_page(gateway: GatewayProcess, fresh_standin: Standin) -> None:
    fresh_standin.control.html_page(count=None)
    err = failure(await call(gateway, "get_pipeline", pipeline_args()))
    assert err["reason"] == "upstream_error"
    assert "HTML page instead of JSON" in err["message"]


async def test_sub_path_gitlab(
    standin_subpath: Standin, fresh_standin_subpath: Standin, tmp_path_factory: pytest.TempPathFactory
) -> None:
    proc = GatewayProcess(
        env=standin_subpath.env(), state_dir=tmp_path_factory.mktemp("gw-sub") / "state"
    ).start()
    try:
        out = structured(await call(proc, "get_pipeline", pipeline_args(include=["jobs"], first=1)))
    finally:
        proc.stop()
    assert out["web_url"] == f"{standin_subpath.url}/{ds.PROJECT_PATH}/-/pipelines/{ds.PIPELINE_ID}"
    assert out["jobs"][0]["web_url"].startswith(f"{standin_subpath.url}/{ds.PROJECT_PATH}/-/jobs/")
    assert "/gitlab/gitlab/" not in out["jobs"][0]["web_url"]


async def test_the_benchmarks_bare_translator_answers_what_the_gateway_answers(
    gateway: GatewayProcess, fresh_standin: Standin
) -> None:
    # `python -m bench` prints the bare translator beside the gateway as the floor of the same
    # work; if the two answered differently, that comparison would mislead.
    args = pipeline_args(include=["jobs"], first=20)
    expected = structured(await call(gateway, "get_pipeline", args))
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "get_pipeline", "arguments": args},
    }
    async with TestClient(TestServer(make_app(fresh_standin.url, ds.ALICE_TOKEN))) as client:
        response = await client.post("/", json=request)
        answer = await response.json()
    assert answer["id"] == 7
    assert answer["result"]["structuredContent"] == expected
    assert json.loads(answer["result"]["content"][-1]["text"]) == expected
