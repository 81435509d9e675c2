"""``list_pipelines``: a project's pipelines, newest first, filtered and paged, against the fake GitLab
(every document validated and executed on GitLab's schema)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from tests.unit.gitlab.fake_gitlab import (
    GITLAB,
    GRAPHQL_URL,
    PROJECT_ID,
    PROJECT_PATH,
    FakeGitLab,
    connection,
)
from tests.unit.gitlab.tool_env import ToolEnv, error, ok

#: (id, status, ref, source), newest first as GitLab lists them.
PIPELINES = [
    (3003, "RUNNING", "main", "push"),
    (3002, "FAILED", "feature/x", "merge_request_event"),
    (3001, "FAILED", "main", "schedule"),
]


@pytest.fixture
def fake() -> FakeGitLab:
    fake = FakeGitLab()
    nodes = [
        {
            "id": f"gid://gitlab/Ci::Pipeline/{number}",
            "status": status,
            "ref": ref,
            "sha": "abc123",
            "source": source,
            "path": f"/{PROJECT_PATH}/-/pipelines/{number}",
            "createdAt": f"2026-11-30T10:0{number % 10}:00Z",
        }
        for number, status, ref, source in PIPELINES
    ]

    def pipelines(_info: Any, first: int | None = None, after: str | None = None, **filters: Any) -> Any:
        chosen = [n for n in nodes if all(n[k] == v for k, v in filters.items() if v is not None)]
        return connection(chosen, first, after)

    fake.projects[PROJECT_PATH]["pipelines"] = pipelines
    return fake


@pytest.fixture
def router(fake: FakeGitLab) -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False) as router:
        router.post(GRAPHQL_URL, name="graphql").mock(side_effect=fake)
        yield router


@pytest.fixture
def gitlab(router: respx.MockRouter) -> respx.Route:
    return router.routes["graphql"]


@pytest.fixture
async def env(make_settings: Callable[..., Settings], gitlab: respx.Route) -> Any:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


async def call(env: ToolEnv, **arguments: Any) -> dict[str, Any]:
    return await env.call("list_pipelines", arguments)


async def test_newest_first_with_get_pipelines_fields_and_created_at(env: ToolEnv) -> None:
    out = ok(await call(env, id=PROJECT_PATH), "list_pipelines")
    assert [p["id"] for p in out["pipelines"]] == [3003, 3002, 3001]
    assert out["pipelines"][0] == {
        "id": 3003,
        "status": "running",
        "ref": "main",
        "sha": "abc123",
        "source": "push",
        "web_url": f"{GITLAB}/{PROJECT_PATH}/-/pipelines/3003",
        "created_at": "2026-11-30T10:03:00Z",
    }
    assert out["page_info"] == {"has_next_page": False, "end_cursor": out["page_info"]["end_cursor"]}


async def test_filters_reach_gitlab(env: ToolEnv, fake: FakeGitLab) -> None:
    out = ok(await call(env, id=str(PROJECT_ID), ref="main", status="FAILED"), "list_pipelines")
    assert [p["id"] for p in out["pipelines"]] == [3001]
    sent = fake.requests[-1]["variables"]
    assert sent["status"] == "FAILED" and sent["ref"] == "main" and sent["byId"] is True


async def test_pages_follow_the_cursor(env: ToolEnv) -> None:
    first = ok(await call(env, id=PROJECT_PATH, first=2), "list_pipelines")
    assert [p["id"] for p in first["pipelines"]] == [3003, 3002]
    assert first["page_info"]["has_next_page"] is True
    rest = ok(
        await call(env, id=PROJECT_PATH, first=2, after=first["page_info"]["end_cursor"]), "list_pipelines"
    )
    assert [p["id"] for p in rest["pipelines"]] == [3001]
    assert rest["page_info"]["has_next_page"] is False


async def test_a_cursor_gitlab_refuses_names_after(env: ToolEnv, gitlab: respx.Route) -> None:
    err = error(await call(env, id=PROJECT_PATH, after="garbage"))
    assert err["reason"] == "bad_request" and err["invalid_arguments"] == ["after"]
    assert err["message"].startswith("`after` is not a cursor GitLab accepts: pass `page_info.end_cursor`")
    assert "(GitLab: Please provide a valid cursor)" in err["message"]
    assert gitlab.call_count == 1


async def test_missing_project_and_bad_input(env: ToolEnv, fake: FakeGitLab) -> None:
    missing = error(await call(env, id="nope/nothing"))
    assert missing["reason"] == "not_found" and "nope/nothing" in missing["message"]
    before = len(fake.requests)
    bad = error(await call(env, id=PROJECT_PATH, status="broken", first=0))
    assert bad["reason"] == "bad_request" and sorted(bad["invalid_arguments"]) == ["first", "status"]
    assert len(fake.requests) == before  # refused before any request


def ref_names(router: respx.MockRouter, branches: list[str], tags: list[str]) -> None:
    rest = f"{GITLAB}/api/v4/projects/{PROJECT_PATH.replace('/', '%2F')}/repository"
    router.get(f"{rest}/branches", params={"per_page": "100"}).mock(
        return_value=httpx.Response(200, json=[{"name": n} for n in branches])
    )
    router.get(f"{rest}/tags", params={"per_page": "100"}).mock(
        return_value=httpx.Response(200, json=[{"name": n} for n in tags])
    )


async def test_an_unknown_ref_is_told_with_the_nearest_names(env: ToolEnv, router: respx.MockRouter) -> None:
    ref_names(router, ["main", "feature/x", "release"], ["v1.0"])
    out = ok(await call(env, id=PROJECT_PATH, ref="mian"), "list_pipelines")
    assert out["pipelines"] == [] and out["nearest_refs"] == ["main"]
    assert "'mian' is no branch or tag" in out["system_instruction"]
    assert "Nearest branch and tag names: 'main'" in out["system_instruction"]
    # A real ref without pipelines has no hint: the page is simply empty.
    ref_names(router, ["main", "quiet"], [])
    out = ok(await call(env, id=PROJECT_PATH, ref="quiet"), "list_pipelines")
    assert out["pipelines"] == [] and "system_instruction" not in out and "nearest_refs" not in out


async def test_without_pipeline_id_get_pipeline_points_to_the_latest_of_a_ref(env: ToolEnv) -> None:
    err = error(await env.call("get_pipeline", {"project_id": PROJECT_PATH}))
    assert err["reason"] == "bad_request" and err["invalid_arguments"] == ["pipeline_id"]
    assert (
        f"call list_pipelines with project_id '{PROJECT_PATH}', ref '<branch or tag>' and first 1"
        in err["message"]
    )
