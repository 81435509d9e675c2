"""``get_pipeline`` (https://docs.gitlab.com/api/graphql/reference/#pipeline), every branch.

GitLab is the in-memory fake of ``tests/unit/gitlab/fake_gitlab.py``: each request is validated
and executed against GitLab's complete GraphQL schema. Results are checked as a caller sees them:
``structuredContent``, the text block, ``isError`` and the number of requests GitLab received.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.gitlab.credentials import ANONYMOUS, Credential
from gateway.tools import all_tools
from gateway.tools.visibility import ANONYMOUS_READS
from tests.unit.gitlab.fake_gitlab import (
    BRIDGE_IDS,
    CHILD_PIPELINE_ID,
    FAILED_JOB_IDS,
    GITLAB,
    GRAPHQL_URL,
    JOB_IDS,
    PIPELINE_ID,
    PROJECT_ID,
    PROJECT_PATH,
    SHA,
    FakeGitLab,
)
from tests.unit.gitlab.tool_env import ToolEnv, error, ok

BASE = {
    "id": PIPELINE_ID,
    "status": "failed",
    "ref": "main",
    "sha": SHA,
    "source": "push",
    "web_url": f"{GITLAB}/{PROJECT_PATH}/-/pipelines/{PIPELINE_ID}",
}
CHILD = {
    "id": CHILD_PIPELINE_ID,
    "status": "failed",
    "ref": "main",
    "sha": SHA,
    "source": "parent_pipeline",
    "web_url": f"{GITLAB}/{PROJECT_PATH}/-/pipelines/{CHILD_PIPELINE_ID}",
    "project_full_path": PROJECT_PATH,
}


@pytest.fixture
def fake() -> FakeGitLab:
    return FakeGitLab()


@pytest.fixture
def gitlab(fake: FakeGitLab) -> Iterator[respx.Route]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        yield router.post(GRAPHQL_URL).mock(side_effect=fake)


@pytest.fixture
async def env(make_settings: Callable[..., Settings], gitlab: respx.Route) -> Any:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


# -- the tool's declaration ---------------------------------------------------------------------


def test_declared_read_only_in_ci_toolset_with_output_schema() -> None:
    tool = next(t for t in all_tools() if t.name == "get_pipeline")
    mcp = tool.to_mcp()
    assert tool.toolset == "ci"
    assert mcp["annotations"]["readOnlyHint"] is True
    assert mcp["annotations"]["destructiveHint"] is False
    schema = mcp["inputSchema"]
    assert "required" not in schema  # `url`, or `project_id` and `pipeline_id`
    assert list(schema["properties"]) == [
        "url",
        "project_id",
        "pipeline_id",
        "include",
        "job_status",
        "first",
        "after",
        "wait_seconds",
    ]
    assert schema["properties"]["include"]["maxItems"] == 1
    assert schema["properties"]["include"]["items"]["enum"] == [
        "jobs",
        "downstream_pipelines",
        "bridge_jobs",
        "failures",
    ]
    assert "failed" in schema["properties"]["job_status"]["enum"]
    assert schema["properties"]["first"].items() >= {"default": 20, "minimum": 1, "maximum": 100}.items()
    assert set(mcp["outputSchema"]["anyOf"][0]["required"]) == {
        "id",
        "status",
        "ref",
        "sha",
        "source",
        "web_url",
    }


# -- reads --------------------------------------------------------------------------------------


async def test_pipeline_alone_has_no_facet_key_and_one_request(
    env: ToolEnv, gitlab: respx.Route, fake: FakeGitLab
) -> None:
    out = ok(await env.call("get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID}))
    assert out == BASE
    assert gitlab.call_count == 1
    sent = fake.requests[0]
    assert sent["operationName"] == "getPipeline"
    assert sent["variables"]["pipelineId"] == f"gid://gitlab/Ci::Pipeline/{PIPELINE_ID}"
    assert sent["variables"]["fullPath"] == PROJECT_PATH
    assert sent["variables"]["byId"] is False
    assert not any(
        sent["variables"][k] for k in ("includeJobs", "includeDownstreamPipelines", "includeBridgeJobs")
    )


async def test_numeric_project_id_is_resolved_in_the_same_request(
    env: ToolEnv, gitlab: respx.Route, fake: FakeGitLab
) -> None:
    out = ok(await env.call("get_pipeline", {"id": str(PROJECT_ID), "pipeline_id": PIPELINE_ID}))
    assert out == BASE
    assert gitlab.call_count == 1
    variables = fake.requests[0]["variables"]
    assert variables["byId"] is True
    assert variables["projectIds"] == [f"gid://gitlab/Project/{PROJECT_ID}"]


async def test_numeric_project_id_as_json_number(env: ToolEnv) -> None:
    assert ok(await env.call("get_pipeline", {"id": PROJECT_ID, "pipeline_id": str(PIPELINE_ID)})) == BASE


@pytest.mark.parametrize(
    "project", ["grp/sub/proj", "grp%2Fsub%2Fproj", "/grp/sub/proj/", "grp%2fsub%2fproj"]
)
async def test_nested_and_encoded_paths_reach_gitlab_encoded_exactly_once(
    env: ToolEnv, gitlab: respx.Route, fake: FakeGitLab, project: str
) -> None:
    # GraphQL takes the decoded full path in a JSON variable: one decode of the caller's form, none added.
    ok(await env.call("get_pipeline", {"id": project, "pipeline_id": PIPELINE_ID}))
    assert gitlab.call_count == 1
    assert fake.requests[0]["variables"]["fullPath"] == "grp/sub/proj"


async def test_page_through_all_45_jobs_20_at_a_time(env: ToolEnv, gitlab: respx.Route) -> None:
    seen: list[int] = []
    after: str | None = None
    pages = []
    while True:
        args: dict[str, Any] = {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["jobs"]}
        if after:
            args["after"] = after
        out = ok(await env.call("get_pipeline", args))
        assert set(out) == {*BASE, "jobs", "page_info"}
        pages.append(len(out["jobs"]))
        seen += [job["id"] for job in out["jobs"]]
        if not out["page_info"]["has_next_page"]:
            break
        after = out["page_info"]["end_cursor"]
        assert isinstance(after, str)
    assert pages == [20, 20, 5]
    assert seen == list(JOB_IDS) and len(set(seen)) == 45
    assert gitlab.call_count == 3


async def test_job_shape(env: ToolEnv) -> None:
    out = ok(
        await env.call(
            "get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["jobs"], "first": 1}
        )
    )
    assert out["jobs"] == [
        {
            "id": 1001,
            "name": "rspec 1/45",
            "status": "success",
            "stage": "build",
            "allow_failure": False,
            "web_url": f"{GITLAB}/{PROJECT_PATH}/-/jobs/1001",
        }
    ]
    assert out["page_info"]["has_next_page"] is True


async def test_first_100_returns_every_job_in_one_page(env: ToolEnv, fake: FakeGitLab) -> None:
    out = ok(
        await env.call(
            "get_pipeline",
            {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["jobs"], "first": 100},
        )
    )
    assert len(out["jobs"]) == 45
    assert out["page_info"]["has_next_page"] is False
    assert fake.requests[0]["variables"]["first"] == 100


@pytest.mark.parametrize("status", ["failed", "FAILED"])
async def test_job_status_filters_the_jobs_facet(env: ToolEnv, fake: FakeGitLab, status: str) -> None:
    out = ok(
        await env.call(
            "get_pipeline",
            {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["jobs"], "job_status": status},
        )
    )
    assert [j["id"] for j in out["jobs"]] == list(FAILED_JOB_IDS)
    assert {j["status"] for j in out["jobs"]} == {"failed"}
    assert [j["allow_failure"] for j in out["jobs"]] == [False, False, True]
    assert out["page_info"] == {"has_next_page": False, "end_cursor": out["page_info"]["end_cursor"]}
    assert fake.requests[0]["variables"]["jobStatuses"] == ["FAILED"]


async def test_downstream_pipelines_leave_out_what_the_caller_cannot_read(env: ToolEnv) -> None:
    out = ok(
        await env.call(
            "get_pipeline",
            {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["downstream_pipelines"]},
        )
    )
    assert set(out) == {*BASE, "downstream_pipelines", "page_info"}
    assert out["downstream_pipelines"] == [CHILD]
    assert out["page_info"]["has_next_page"] is False


async def test_bridge_jobs_carry_their_downstream_pipeline_or_null(env: ToolEnv) -> None:
    out = ok(
        await env.call(
            "get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["bridge_jobs"]}
        )
    )
    assert set(out) == {*BASE, "bridge_jobs", "page_info"}
    assert out["bridge_jobs"] == [
        {"id": BRIDGE_IDS[0], "name": "trigger-child", "status": "failed", "downstream_pipeline": CHILD},
        {"id": BRIDGE_IDS[1], "name": "trigger-deploy", "status": "success", "downstream_pipeline": None},
    ]


async def test_bridges_are_not_jobs(env: ToolEnv) -> None:
    out = ok(
        await env.call(
            "get_pipeline",
            {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["jobs"], "first": 100},
        )
    )
    assert not set(BRIDGE_IDS) & {j["id"] for j in out["jobs"]}


async def test_sub_path_gitlab_web_urls_carry_the_root_once(make_settings: Callable[..., Settings]) -> None:
    fake = FakeGitLab(sub_path="/gitlab")
    with respx.mock() as router:
        router.post("https://gitlab.example.com/gitlab/api/graphql").mock(side_effect=fake)
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(gitlab={"url": "https://gitlab.example.com/gitlab/api/v4/"}), http)
            out = ok(
                await env.call(
                    "get_pipeline",
                    {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": ["jobs"], "first": 1},
                )
            )
    assert out["web_url"] == f"{GITLAB}/gitlab/{PROJECT_PATH}/-/pipelines/{PIPELINE_ID}"
    assert out["jobs"][0]["web_url"] == f"{GITLAB}/gitlab/{PROJECT_PATH}/-/jobs/1001"


async def test_null_connection_nodes_and_missing_optional_fields_are_tolerated(
    make_settings: Callable[..., Settings],
) -> None:
    data = {
        "project": {
            "id": "gid://gitlab/Project/1",
            "fullPath": "g/p",
            "pipeline": {
                "id": "gid://gitlab/Ci::Pipeline/5",
                "status": "RUNNING",
                "ref": None,
                "sha": None,
                "source": None,
                "path": None,
                "downstream": {
                    "pageInfo": {"hasNextPage": False, "endCursor": None},
                    "nodes": [
                        None,
                        {
                            "id": "gid://gitlab/Ci::Pipeline/6",
                            "status": "PENDING",
                            "ref": "x",
                            "sha": "y",
                            "source": "pipeline",
                            "path": "/o/p/-/pipelines/6",
                            "project": None,
                        },
                    ],
                },
            },
        }
    }
    with respx.mock() as router:
        router.post(GRAPHQL_URL).respond(200, json={"data": data})
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(), http)
            out = ok(
                await env.call(
                    "get_pipeline", {"id": "g/p", "pipeline_id": 5, "include": ["downstream_pipelines"]}
                )
            )
    assert out == {
        "id": 5,
        "status": "running",
        "ref": None,
        "sha": None,
        "source": None,
        "web_url": None,
        "downstream_pipelines": [
            {
                "id": 6,
                "status": "pending",
                "ref": "x",
                "sha": "y",
                "source": "pipeline",
                "web_url": f"{GITLAB}/o/p/-/pipelines/6",
                "project_full_path": None,
            }
        ],
        "page_info": {"has_next_page": False, "end_cursor": None},
    }


async def test_null_status_is_an_upstream_error(make_settings: Callable[..., Settings]) -> None:
    pipeline = {"id": "gid://gitlab/Ci::Pipeline/5", "status": None, "ref": "m", "sha": "s", "path": "/g/p"}
    with respx.mock() as router:
        router.post(GRAPHQL_URL).respond(200, json={"data": {"project": {"id": "x", "pipeline": pipeline}}})
        async with httpx.AsyncClient() as http:
            err = error(
                await ToolEnv(make_settings(), http).call("get_pipeline", {"id": "g/p", "pipeline_id": 5})
            )
    assert err["reason"] == "upstream_error"
    assert err["message"].startswith("GitLab answered get_pipeline in an unexpected shape (")
    assert err["message"].endswith("try again, and report it if it persists.")


async def test_malformed_global_id_is_an_upstream_error(make_settings: Callable[..., Settings]) -> None:
    data = {
        "project": {
            "id": "x",
            "fullPath": "g/p",
            "pipeline": {
                "id": "not-a-gid",
                "status": "FAILED",
                "ref": "m",
                "sha": "s",
                "source": "push",
                "path": "/g/p",
            },
        }
    }
    with respx.mock() as router:
        router.post(GRAPHQL_URL).respond(200, json={"data": data})
        async with httpx.AsyncClient() as http:
            err = error(
                await ToolEnv(make_settings(), http).call("get_pipeline", {"id": "g/p", "pipeline_id": 5})
            )
    assert err["reason"] == "upstream_error"
    assert "unexpected shape" in err["message"]


# -- not found ------------------------------------------------------------------------------------


async def test_missing_project_is_not_found_naming_the_project(env: ToolEnv, gitlab: respx.Route) -> None:
    err = error(await env.call("get_pipeline", {"id": "nope/missing", "pipeline_id": PIPELINE_ID}))
    assert err["reason"] == "not_found"
    assert err["message"] == (
        "Project 'nope/missing' not found or inaccessible. Check the project ID or full path (for example "
        "`group/subgroup/project`) and that your GitLab token can read the project."
    )
    assert gitlab.call_count == 1


async def test_unreadable_project_is_reported_like_a_missing_one(env: ToolEnv) -> None:
    err = error(await env.call("get_pipeline", {"id": "other/private", "pipeline_id": 987656}))
    assert err["reason"] == "not_found"
    assert err["message"].startswith("Project 'other/private' not found or inaccessible.")


async def test_missing_numeric_project_is_not_found(env: ToolEnv) -> None:
    err = error(await env.call("get_pipeline", {"id": "999", "pipeline_id": PIPELINE_ID}))
    assert err["reason"] == "not_found"
    assert err["message"].startswith("Project '999' not found or inaccessible.")


async def test_missing_pipeline_is_a_different_not_found(env: ToolEnv, gitlab: respx.Route) -> None:
    err = error(await env.call("get_pipeline", {"id": PROJECT_PATH, "pipeline_id": 5, "include": ["jobs"]}))
    assert err["reason"] == "not_found"
    assert err["message"] == (
        f"Pipeline 5 not found or inaccessible in project '{PROJECT_PATH}'. Check that 5 is the pipeline "
        "ID (the number in `/-/pipelines/<id>`, not the per-project IID) and that your GitLab token can "
        "read the project's pipelines."
    )
    assert gitlab.call_count == 1


async def test_an_anonymous_gateway_says_it_sees_public_projects_only(env: ToolEnv) -> None:
    # No GITLAB_TOKEN: there is no token to check, so the message says what anonymous means.
    err = error(
        await env.call(
            "get_pipeline", {"id": "nope/missing", "pipeline_id": PIPELINE_ID}, credential=ANONYMOUS
        )
    )
    assert err["reason"] == "not_found"
    assert err["message"] == (
        "Project 'nope/missing' not found or inaccessible. Check the project ID or full path (for example "
        "`group/subgroup/project`). This gateway reads GitLab anonymously (no GITLAB_TOKEN set), so only "
        "public projects are visible: to see private ones, set GITLAB_TOKEN to a token with the read_api "
        "scope (api to run pipelines) where the gateway starts, and restart it."
    )
    for tool, arguments in (
        ("get_pipeline", {"id": PROJECT_PATH, "pipeline_id": 5}),
        ("list_pipelines", {"id": "nope/missing"}),
    ):
        err = error(await env.call(tool, arguments, credential=ANONYMOUS))
        assert err["reason"] == "not_found", tool
        assert err["message"].endswith(ANONYMOUS_READS) and "token can" not in err["message"], tool


# -- bad input: a clear error and no request -----------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "names", "says"),
    [
        ({"id": PROJECT_PATH, "pipeline_id": "../../user"}, ["pipeline_id"], "must be a positive integer"),
        ({"id": PROJECT_PATH, "pipeline_id": -1}, ["pipeline_id"], "must be a positive integer"),
        ({"id": PROJECT_PATH, "pipeline_id": 0}, ["pipeline_id"], "must be a positive integer"),
        ({"id": PROJECT_PATH, "pipeline_id": 1.5}, ["pipeline_id"], "must be a positive integer"),
        ({"id": PROJECT_PATH, "pipeline_id": True}, ["pipeline_id"], "must be a positive integer"),
        ({"id": PROJECT_PATH, "pipeline_id": 1, "first": 0}, ["first"], "greater than or equal to 1"),
        ({"id": PROJECT_PATH, "pipeline_id": 1, "first": 101}, ["first"], "less than or equal to 100"),
        # Not read as page sizes 1 and 2 (the input schema says integer).
        ({"id": PROJECT_PATH, "pipeline_id": 1, "first": True}, ["first"], "from 1 to 100, not true"),
        ({"id": PROJECT_PATH, "pipeline_id": 1, "first": 2.0}, ["first"], "from 1 to 100, not 2.0"),
        ({"id": PROJECT_PATH, "pipeline_id": 1, "first": "2.0"}, ["first"], 'from 1 to 100, not "2.0"'),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "include": ["artifacts"]},
            ["include"],
            'unknown facet "artifacts"; accepts one of: jobs, downstream_pipelines, bridge_jobs, failures',
        ),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "include": ["jobs", "bridge_jobs"]},
            ["include"],
            "at most one facet per call, got 2 (jobs, bridge_jobs)",
        ),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "include": ["jobs", "jobs"]},
            ["include"],
            "at most one facet",
        ),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "job_status": "failed"},
            ["job_status"],
            'filters the jobs facet only: add include: ["jobs"]',
        ),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "include": ["bridge_jobs"], "job_status": "failed"},
            ["job_status"],
            "filters the jobs facet only",
        ),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "include": ["jobs"], "job_status": "broken"},
            ["job_status"],
            'unknown job status "broken" (accepts one of: canceled, canceling, created, failed',
        ),
        ({"id": PROJECT_PATH, "pipeline_id": 1, "after": "abc"}, ["after"], "cursor of an include facet"),
        ({"id": PROJECT_PATH, "pipeline_id": 1, "include": ["jobs"], "after": ""}, ["after"], "end_cursor"),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "project_id": 3},
            ["arguments"],
            "`id` and `project_id` are two names of one argument and were given different values; give "
            "`project_id` only",
        ),
        (
            {"id": PROJECT_PATH, "pipeline_id": 1, "include": ["jobs"], "exclude_allow_failure": True},
            ["exclude_allow_failure"],
            "unknown argument `exclude_allow_failure`",
        ),
        ({"id": "../../etc", "pipeline_id": 1}, ["project_id"], "`.` or `..` segments"),
        ({"id": "grp%252Fsub", "pipeline_id": 1}, ["project_id"], "looks URL-encoded twice"),
        ({"id": "grp/sub proj", "pipeline_id": 1}, ["project_id"], "is not a GitLab path"),
        ({"id": "", "pipeline_id": 1}, ["project_id"], "numeric ID or a full path"),
        ({"id": "-5", "pipeline_id": 1}, ["project_id"], "lacks its namespace"),
        ({"id": "g/-5", "pipeline_id": 1}, ["project_id"], "is not a GitLab path"),
        ({"id": "0", "pipeline_id": 1}, ["project_id"], 'project ID "0" must be a positive integer'),
        (
            {"id": ["grp"], "pipeline_id": 1},
            ["project_id"],
            "must be a numeric project ID or a full path string",
        ),
    ],
)
async def test_bad_input_is_a_clear_tool_error_without_a_request(
    env: ToolEnv, gitlab: respx.Route, arguments: dict[str, Any], names: list[str], says: str
) -> None:
    err = error(await env.call("get_pipeline", arguments))
    assert err["reason"] == "bad_request"
    assert err["invalid_arguments"] == names
    assert err["message"].startswith("Invalid arguments for get_pipeline: ")
    assert says in err["message"]
    assert "Traceback" not in err["message"]
    assert gitlab.call_count == 0


async def test_include_given_as_a_lone_string_is_one_facet(env: ToolEnv) -> None:
    out = ok(
        await env.call(
            "get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": "bridge_jobs"}
        )
    )
    assert len(out["bridge_jobs"]) == 2


async def test_empty_include_and_nulls_are_the_pipeline_alone(env: ToolEnv) -> None:
    out = ok(
        await env.call(
            "get_pipeline",
            {
                "id": PROJECT_PATH,
                "pipeline_id": PIPELINE_ID,
                "include": [],
                "job_status": None,
                "after": None,
            },
        )
    )
    assert out == BASE


# -- GitLab failures as the caller sees them ------------------------------------------------------


async def test_429_then_200_retries_once_after_retry_after(
    make_settings: Callable[..., Settings], fake: FakeGitLab
) -> None:
    with respx.mock() as router:
        route = router.post(GRAPHQL_URL).mock(
            side_effect=[
                httpx.Response(429, headers={"Retry-After": "1"}, json={"message": "throttled"}),
                # respx calls a callable from the list too, though its types name only responses
                fake,  # type: ignore[list-item]
            ]
        )
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(), http)
            out = ok(await env.call("get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID}))
    assert out == BASE
    assert route.call_count == 2
    assert len(env.sleeps) == 1 and 1.0 <= env.sleeps[0] < 1.5


async def test_429_past_the_retry_budget_is_rate_limited_with_retry_after(
    make_settings: Callable[..., Settings],
) -> None:
    with respx.mock() as router:
        route = router.post(GRAPHQL_URL).respond(
            429, headers={"Retry-After": "1", "RateLimit-Name": "throttle_authenticated_api"}, json={}
        )
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(gitlab={"retry_attempts": 3}), http)
            result = await env.call("get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID})
    assert result["structuredContent"]["error"]["request_id"] == "req-test-1"
    assert error(result) == {
        "reason": "rate_limited",
        "message": "Rate limited by GitLab (throttle_authenticated_api). Retry after 1 second.",
        "retry_after_seconds": 1,
        "limit": "throttle_authenticated_api",
        "status": 429,
    }
    assert route.call_count == 3
    assert len(env.sleeps) == 2 and all(s >= 1.0 for s in env.sleeps)


CURSOR_REFUSED = (
    "`after` is not a cursor GitLab accepts: pass `page_info.end_cursor` from the previous page of the "
    "same call (same arguments), or omit `after` for the first page. (GitLab: Please provide a valid cursor)"
)


@pytest.mark.parametrize("facet", ["jobs", "downstream_pipelines", "bridge_jobs"])
async def test_a_cursor_gitlab_refuses_names_after_and_is_not_retried(
    env: ToolEnv, gitlab: respx.Route, facet: str
) -> None:
    """GitLab answers a cursor it cannot decode with a GraphQL error ("Please provide a valid
    cursor") beside a null connection."""
    result = await env.call(
        "get_pipeline",
        {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID, "include": [facet], "after": "garbage"},
    )
    assert error(result) == {
        "reason": "bad_request",
        "message": CURSOR_REFUSED,
        "invalid_arguments": ["after"],
    }
    assert gitlab.call_count == 1


async def test_a_cursor_error_without_after_is_gitlabs_words(make_settings: Callable[..., Settings]) -> None:
    """Only the caller's `after` is blamed: a refused cursor the call did not carry is reported as
    GitLab said it, naming no argument."""
    answer = {"data": None, "errors": [{"message": "Please provide a valid cursor"}]}
    with respx.mock() as router:
        router.post(GRAPHQL_URL).respond(200, json=answer)
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(), http)
            result = await env.call("get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID})
    assert error(result) == {
        "reason": "bad_request",
        "message": "GitLab rejected the request: Please provide a valid cursor",
    }


async def test_html_login_page_is_an_error_saying_so(make_settings: Callable[..., Settings]) -> None:
    page = "<!DOCTYPE html><html><body><form action='/login'>Sign in</form></body></html>"
    with respx.mock() as router:
        router.post(GRAPHQL_URL).respond(200, text=page, headers={"Content-Type": "text/html; charset=utf-8"})
        async with httpx.AsyncClient() as http:
            err = error(
                await ToolEnv(make_settings(), http).call(
                    "get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID}
                )
            )
    assert err["reason"] == "upstream_error"
    assert "with an HTML page instead of JSON" in err["message"]
    assert "proxy, SSO or login page" in err["message"]


async def test_passthrough_without_a_token_is_unauthorized_without_a_request(
    make_settings: Callable[..., Settings], gitlab: respx.Route
) -> None:
    async with httpx.AsyncClient() as http:
        env = ToolEnv(make_settings(gitlab={"credential_mode": "passthrough", "token": None}), http)
        err = error(
            await env.call("get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID}, credential=None)
        )
    assert err["reason"] == "unauthorized"
    assert "PRIVATE-TOKEN" in err["message"]
    assert gitlab.call_count == 0


async def test_the_callers_token_and_request_id_reach_gitlab(
    make_settings: Callable[..., Settings], gitlab: respx.Route
) -> None:
    async with httpx.AsyncClient() as http:
        env = ToolEnv(make_settings(gitlab={"credential_mode": "passthrough", "token": None}), http)
        ok(
            await env.call(
                "get_pipeline",
                {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID},
                credential=Credential(header="Authorization", token="oauth-abc", source="passthrough"),
            )
        )
    sent = gitlab.calls.last.request.headers
    assert sent["Authorization"] == "Bearer oauth-abc"
    assert "PRIVATE-TOKEN" not in sent
    assert sent["X-Request-Id"] == "req-test-1"


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"pipeline_id": 1}, "get_pipeline: `project_id` is missing; name the pipeline by `url`"),
        ({"project_id": PROJECT_PATH}, "get_pipeline: `pipeline_id` is missing"),
        (
            {"url": f"{GITLAB}/{PROJECT_PATH}/-/pipelines/5", "project_id": PROJECT_PATH},
            "get_pipeline: give either `url`, or `project_id` and `pipeline_id`, not both.",
        ),
        ({"url": "https://elsewhere.example.com/g/p/-/pipelines/5"}, "is not on this gateway's GitLab"),
        ({"url": f"{GITLAB}/{PROJECT_PATH}/-/jobs/5"}, "is not a pipeline URL"),
    ],
)
async def test_a_pipeline_is_named_by_url_or_by_project_and_pipeline_id(
    env: ToolEnv, gitlab: respx.Route, arguments: dict[str, Any], says: str
) -> None:
    err = error(await env.call("get_pipeline", arguments))
    assert err["reason"] == "bad_request"
    assert says in err["message"]
    assert gitlab.call_count == 0


async def test_a_pipeline_url_reads_the_same_pipeline_as_its_ids(env: ToolEnv, gitlab: respx.Route) -> None:
    by_url = ok(await env.call("get_pipeline", {"url": f"{GITLAB}/{PROJECT_PATH}/-/pipelines/{PIPELINE_ID}"}))
    by_ids = ok(await env.call("get_pipeline", {"project_id": PROJECT_PATH, "pipeline_id": PIPELINE_ID}))
    by_alias = ok(await env.call("get_pipeline", {"id": PROJECT_PATH, "pipeline_id": PIPELINE_ID}))
    assert by_url == by_ids == by_alias
