"""The superseded pipeline tools: each is ``get_pipeline`` with one facet, reached the old way.

Mapping (``docs/tools/get_pipeline.md``):
``get_pipeline_jobs`` → include jobs; ``get_pipeline_failing_jobs`` → include jobs, job_status
failed; ``get_downstream_pipelines`` → include downstream_pipelines; ``get_failing_bridge_jobs``
→ include bridge_jobs, failed bridges only (filtered by GitLab).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.tools import all_tools
from tests.unit.gitlab.fake_gitlab import (
    BRIDGE_IDS,
    FAILED_JOB_IDS,
    GITLAB,
    GRAPHQL_URL,
    PIPELINE_ID,
    PROJECT_ID,
    PROJECT_PATH,
    FakeGitLab,
)
from tests.unit.gitlab.tool_env import ToolEnv, error, ok

PIPELINE_URL = f"{GITLAB}/{PROJECT_PATH}/-/pipelines/{PIPELINE_ID}"
LEGACY: dict[str, dict[str, Any]] = {
    "get_pipeline_jobs": {"include": ["jobs"]},
    "get_pipeline_failing_jobs": {"include": ["jobs"], "job_status": "failed"},
    "get_downstream_pipelines": {"include": ["downstream_pipelines"]},
    "get_failing_bridge_jobs": {"include": ["bridge_jobs"]},
}


@pytest.fixture
def fake() -> FakeGitLab:
    return FakeGitLab()


@pytest.fixture
def gitlab(fake: FakeGitLab) -> Iterator[respx.Route]:
    with respx.mock(assert_all_called=False) as router:
        yield router.post(GRAPHQL_URL).mock(side_effect=fake)


@pytest.fixture
async def env(make_settings: Callable[..., Settings], gitlab: respx.Route) -> Any:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(toolsets=["default", "superseded"]), http)


@pytest.mark.parametrize("name", list(LEGACY))
def test_in_their_own_toolset_read_only_and_pointing_at_get_pipeline(name: str) -> None:
    tool = next(t for t in all_tools() if t.name == name)
    assert tool.toolset == "superseded" and tool.annotations.read_only and tool.title
    assert tool.description.startswith("Superseded by get_pipeline with ")
    schema = tool.input_schema()
    assert set(schema["properties"]) == {"url", "project_id", "pipeline_id", "first", "after"}
    assert "required" not in schema


@pytest.mark.parametrize(
    "name", ["get_pipeline_jobs", "get_pipeline_failing_jobs", "get_downstream_pipelines"]
)
async def test_each_is_get_pipeline_with_its_facet(env: ToolEnv, gitlab: respx.Route, name: str) -> None:
    target = {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID}
    legacy = ok(await env.call(name, target), name)
    modern = ok(await env.call("get_pipeline", {**target, **LEGACY[name]}))
    assert legacy == modern
    assert gitlab.call_count == 2  # one request each


async def test_failing_jobs(env: ToolEnv, fake: FakeGitLab) -> None:
    out = ok(await env.call("get_pipeline_failing_jobs", {"url": PIPELINE_URL}), "get_pipeline_failing_jobs")
    assert [j["id"] for j in out["jobs"]] == list(FAILED_JOB_IDS)
    assert fake.requests[0]["variables"]["jobStatuses"] == ["FAILED"]
    assert fake.requests[0]["variables"]["fullPath"] == PROJECT_PATH


async def test_failing_bridge_jobs_are_filtered_by_gitlab(env: ToolEnv, fake: FakeGitLab) -> None:
    out = ok(await env.call("get_failing_bridge_jobs", {"url": PIPELINE_URL}), "get_failing_bridge_jobs")
    assert [b["id"] for b in out["bridge_jobs"]] == [BRIDGE_IDS[0]]
    assert out["bridge_jobs"][0]["downstream_pipeline"]["project_full_path"] == PROJECT_PATH
    assert out["page_info"]["has_next_page"] is False
    variables = fake.requests[0]["variables"]
    assert variables["bridgeStatuses"] == ["FAILED"] and variables["includeBridgeJobs"] is True


async def test_paging_through_jobs_the_old_way(env: ToolEnv) -> None:
    ids: list[int] = []
    args: dict[str, Any] = {"id": str(PROJECT_ID), "pipeline_id": PIPELINE_ID, "first": 20}
    while True:
        out = ok(await env.call("get_pipeline_jobs", args), "get_pipeline_jobs")
        ids += [j["id"] for j in out["jobs"]]
        if not out["page_info"]["has_next_page"]:
            break
        args["after"] = out["page_info"]["end_cursor"]
    assert len(ids) == len(set(ids)) == 45


async def test_url_on_a_sub_path_gitlab(make_settings: Callable[..., Settings]) -> None:
    fake = FakeGitLab(sub_path="/gitlab")
    with respx.mock() as router:
        router.post(f"{GITLAB}/gitlab/api/graphql").mock(side_effect=fake)
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(gitlab={"url": f"{GITLAB}/gitlab"}, toolsets=["all"]), http)
            out = ok(
                await env.call(
                    "get_downstream_pipelines",
                    {"url": f"{GITLAB}/gitlab/{PROJECT_PATH}/-/pipelines/{PIPELINE_ID}"},
                ),
                "get_downstream_pipelines",
            )
    assert out["web_url"] == f"{GITLAB}/gitlab/{PROJECT_PATH}/-/pipelines/{PIPELINE_ID}"
    assert len(out["downstream_pipelines"]) == 1


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "get_pipeline_jobs: `project_id` is missing; name the pipeline by `url`"),
        ({"id": PROJECT_PATH}, "get_pipeline_jobs: `pipeline_id` is missing"),
        (
            {"url": PIPELINE_URL, "id": PROJECT_PATH, "pipeline_id": 1},
            "get_pipeline_jobs: give either `url`, or `project_id` and `pipeline_id`, not both.",
        ),
        (
            {"url": f"https://evil.example.com/{PROJECT_PATH}/-/pipelines/1"},
            "is not on this gateway's GitLab (https://gitlab.example.com)",
        ),
        ({"url": f"{GITLAB}/{PROJECT_PATH}/-/merge_requests/3"}, "is not a pipeline URL"),
        ({"id": PROJECT_PATH, "pipeline_id": "../../user"}, "`pipeline_id`: must be a positive integer"),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "first": 101},
            "`first`: Input should be less than or equal to 100",
        ),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "merge_request_iid": 3},
            "unknown argument `merge_request_iid`",
        ),
    ],
)
async def test_bad_input_is_refused_without_a_request(
    env: ToolEnv, gitlab: respx.Route, arguments: dict[str, Any], says: str
) -> None:
    err = error(await env.call("get_pipeline_jobs", arguments))
    assert err["reason"] == "bad_request"
    assert says in err["message"]
    assert gitlab.call_count == 0


async def test_missing_pipeline_is_not_found(env: ToolEnv) -> None:
    err = error(await env.call("get_failing_bridge_jobs", {"id": PROJECT_PATH, "pipeline_id": 5}))
    assert err["reason"] == "not_found"
    assert err["message"].startswith(f"Pipeline 5 not found or inaccessible in project '{PROJECT_PATH}'.")


async def test_not_served_by_default_and_the_refusal_says_how_to_add_them(
    make_settings: Callable[..., Settings],
) -> None:
    from gateway.errors import ToolError

    async with httpx.AsyncClient() as http:
        env = ToolEnv(make_settings(), http)
        assert "get_pipeline_jobs" not in [t.name for t in env.registry.listed]
        with pytest.raises(ToolError) as refused:
            env.registry.resolve("get_pipeline_jobs")
    assert refused.value.reason == "unauthorized"
    assert "superseded by get_pipeline" in refused.value.message
    assert "--toolsets default,superseded" in refused.value.message


@pytest.mark.parametrize(
    ("toolsets", "served"),
    [
        ((), False),
        (("default",), False),
        (("default", "superseded"), True),
        (("all",), True),
        (("ci",), False),
    ],
)
def test_the_superseded_toolset_is_added_in_one_word(toolsets: tuple[str, ...], served: bool) -> None:
    from gateway.tools.registry import Registry

    listed = {t.name for t in Registry(all_tools(), toolsets=toolsets).listed}
    assert ("get_pipeline_jobs" in listed) is served
    assert ("get_pipeline" in listed) is True


def test_the_config_accepts_the_keywords(make_settings: Callable[..., Settings]) -> None:
    assert make_settings(toolsets=["default", "superseded"]).toolsets == ("default", "superseded")
    assert make_settings(toolsets="all").toolsets == ("all",)
