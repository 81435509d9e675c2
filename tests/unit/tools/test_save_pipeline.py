"""``save_pipeline`` (https://docs.gitlab.com/api/graphql/reference/#mutationpipelinecreate), every branch.

GitLab is mocked with respx; every GraphQL document and its variables are validated against
GitLab's complete schema before a canned answer is returned, so a wrong field or input fails the
test. Results are checked as a caller sees them: ``structuredContent``, the error text, and the
number of requests GitLab received (a create is never sent twice).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx
from graphql import get_operation_ast, parse, validate
from graphql.execution.values import get_variable_values
from jsonschema import Draft202012Validator

from gateway.config import Settings
from gateway.gitlab.credentials import ANONYMOUS
from gateway.tools import all_tools
from gateway.tools.visibility import ANONYMOUS_READS
from tests.unit.gitlab.fake_gitlab import gitlab_schema
from tests.unit.gitlab.tool_env import ToolEnv

GITLAB = "https://gitlab.example.com"
PROJECT = "grp/sub/proj"
PROJECT_WEB = f"{GITLAB}/{PROJECT}"
PIPELINE_ID = 987654


# -- a GitLab that checks what it is sent -----------------------------------------------------------


class GraphQL:
    """respx side effect: validates each request against GitLab's schema, then answers from a queue.

    ``answers`` maps an operation name (``PipelineCreate``...) to a list of answers consumed in
    order: a JSON body (dict), an ``httpx.Response``, or an exception to raise.
    """

    def __init__(self) -> None:
        self.answers: dict[str, list[Any]] = {}
        self.sent: list[dict[str, Any]] = []

    def on(self, operation: str, *answers: Any) -> GraphQL:
        self.answers.setdefault(operation, []).extend(answers)
        return self

    def names(self) -> list[str]:
        return [body["operationName"] for body in self.sent]

    def variables(self, operation: str) -> list[dict[str, Any]]:
        return [body["variables"] for body in self.sent if body["operationName"] == operation]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.sent.append(body)
        document = parse(body["query"])
        errors = validate(gitlab_schema(), document)
        assert not errors, errors
        operation = get_operation_ast(document, body["operationName"])
        assert operation is not None, f"the document holds no operation {body['operationName']}"
        coerced = get_variable_values(
            gitlab_schema(), operation.variable_definitions or [], body["variables"]
        )
        assert not isinstance(coerced, list), coerced  # a list is graphql-core's variable errors
        queue = self.answers.get(body["operationName"])
        assert queue, f"unexpected request {body['operationName']}"
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        return httpx.Response(200, json=answer)


@pytest.fixture
def gql() -> GraphQL:
    return GraphQL()


@pytest.fixture
def route(gql: GraphQL) -> Iterator[respx.Route]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        yield router.post(f"{GITLAB}/api/graphql").mock(side_effect=gql)


@pytest.fixture
async def env(make_settings: Callable[..., Settings], route: respx.Route) -> Any:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


def pipeline(status: str = "CREATED", ref: str = "main", pid: int = PIPELINE_ID) -> dict[str, Any]:
    return {
        "id": f"gid://gitlab/Ci::Pipeline/{pid}",
        "status": status,
        "ref": ref,
        "path": f"/{PROJECT}/-/pipelines/{pid}",
        "project": {"fullPath": PROJECT, "webUrl": PROJECT_WEB},
    }


def payload(field: str, pipe: dict[str, Any] | None, errors: list[str] | None = None) -> dict[str, Any]:
    return {"data": {field: {"pipeline": pipe, "errors": errors or []}}}


def project(pipe: dict[str, Any] | None = None, *, with_pipeline: bool = False) -> dict[str, Any]:
    node: dict[str, Any] = {"fullPath": PROJECT, "webUrl": PROJECT_WEB}
    if with_pipeline:
        node["pipeline"] = pipe
    return {"data": {"project": node}}


NOT_AVAILABLE = {
    "data": None,
    "errors": [
        {
            "message": "The resource that you are attempting to access does not exist or you don't have "
            "permission to perform this action"
        }
    ],
}


def ok(result: dict[str, Any]) -> dict[str, Any]:
    """structuredContent of a success, mirrored as JSON text and valid against the outputSchema."""
    assert not result.get("isError"), result
    structured: dict[str, Any] = result["structuredContent"]
    assert json.loads(result["content"][-1]["text"]) == structured
    tool = next(t for t in all_tools() if t.name == "save_pipeline")
    schema = tool.output_schema()
    assert schema is not None
    Draft202012Validator(schema).validate(structured)
    return structured


def error(result: dict[str, Any]) -> dict[str, Any]:
    """structuredContent.error of a failure; its message is also the first text block."""
    assert result.get("isError") is True, result
    err: dict[str, Any] = result["structuredContent"]["error"]
    assert result["content"][0]["text"] == err["message"]
    # Every tool error names its request id (the id on the gateway\'s log lines for the call).
    assert err.pop("request_id", None), err
    return err


# -- declaration ----------------------------------------------------------------------------------


def test_declared_destructive_not_read_only_in_ci_toolset() -> None:
    tool = next(t for t in all_tools() if t.name == "save_pipeline")
    mcp = tool.to_mcp()
    assert tool.toolset == "ci"
    assert mcp["annotations"]["readOnlyHint"] is False
    assert mcp["annotations"]["destructiveHint"] is True
    assert mcp["annotations"]["idempotentHint"] is False
    schema = mcp["inputSchema"]
    assert list(schema["properties"]) == [
        "url",
        "project_id",
        "pipeline_id",
        "action",
        "ref",
        "variables",
        "inputs",
        "reason",
    ]
    assert schema.get("required", []) == []
    # "create" is the result's own spelling of a create, so a caller may send it back.
    assert schema["properties"]["action"]["anyOf"][0]["enum"] == ["create", "retry", "cancel"]
    variable = schema["properties"]["variables"]["anyOf"][0]["items"]
    assert variable["required"] == ["key", "value"]
    assert variable["properties"]["variable_type"]["enum"] == ["env_var", "file"]
    assert set(mcp["outputSchema"]["anyOf"][0]["required"]) == {"action", "id", "status", "ref", "web_url"}


# -- create ---------------------------------------------------------------------------------------


async def test_create_by_path_sends_one_mutation_with_variables_and_inputs(
    env: ToolEnv, gql: GraphQL
) -> None:
    gql.on("PipelineCreate", payload("pipelineCreate", pipeline("CREATED", "main")))
    out = ok(
        await env.call(
            "save_pipeline",
            {
                "project_id": PROJECT,
                "ref": "main",
                "variables": [
                    {"key": "DEPLOY_ENV", "value": "staging"},
                    {"key": "CONFIG", "value": "a: 1", "variable_type": "file"},
                ],
                "inputs": {"environment": "staging", "replicas": 3, "dry_run": True, "regions": ["eu", "us"]},
            },
        )
    )
    assert out == {
        "action": "create",
        "id": PIPELINE_ID,
        "status": "created",
        "ref": "main",
        "web_url": f"{PROJECT_WEB}/-/pipelines/{PIPELINE_ID}",
    }
    assert gql.names() == ["PipelineCreate"]
    assert gql.variables("PipelineCreate") == [
        {
            "input": {
                "projectPath": PROJECT,
                "ref": "main",
                "variables": [
                    {"key": "DEPLOY_ENV", "value": "staging", "variableType": "ENV_VAR"},
                    {"key": "CONFIG", "value": "a: 1", "variableType": "FILE"},
                ],
                "inputs": [
                    {"name": "environment", "value": "staging"},
                    {"name": "replicas", "value": 3},
                    {"name": "dry_run", "value": True},
                    {"name": "regions", "value": ["eu", "us"]},
                ],
            }
        }
    ]


async def test_create_without_variables_or_inputs_sends_neither(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCreate", payload("pipelineCreate", pipeline("PENDING", "feature/x")))
    out = ok(await env.call("save_pipeline", {"project_id": "grp%2Fsub%2Fproj", "ref": " feature/x "}))
    assert out["status"] == "pending" and out["ref"] == "feature/x"
    assert gql.variables("PipelineCreate") == [{"input": {"projectPath": PROJECT, "ref": "feature/x"}}]


async def test_create_may_be_asked_for_with_the_results_own_action(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCreate", payload("pipelineCreate", pipeline("CREATED", "main")))
    out = ok(await env.call("save_pipeline", {"action": "create", "project_id": PROJECT, "ref": "main"}))
    assert out["action"] == "create" and out["id"] == PIPELINE_ID
    assert gql.variables("PipelineCreate") == [{"input": {"projectPath": PROJECT, "ref": "main"}}]


async def test_create_by_an_anonymous_gateway_says_it_has_no_token(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCreate", NOT_AVAILABLE)
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}, credential=ANONYMOUS))
    assert err["reason"] == "not_found"
    assert err["message"] == (
        f"Project '{PROJECT}' not found, or GitLab does not let a caller without a token run pipelines "
        f"in it. {ANONYMOUS_READS}"
    )
    gql.on("PipelineRetry", NOT_AVAILABLE)
    err = error(
        await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "retry"}, credential=ANONYMOUS)
    )
    assert err["message"].endswith(ANONYMOUS_READS) and "this token" not in err["message"]


async def test_create_by_numeric_project_id_resolves_the_path_first(env: ToolEnv, gql: GraphQL) -> None:
    gql.on(
        "SavePipelineProject",
        {"data": {"projects": {"nodes": [{"fullPath": PROJECT, "webUrl": PROJECT_WEB}]}}},
    )
    gql.on("PipelineCreate", payload("pipelineCreate", pipeline()))
    out = ok(await env.call("save_pipeline", {"project_id": 42, "ref": "main"}))
    assert out["web_url"] == f"{PROJECT_WEB}/-/pipelines/{PIPELINE_ID}"
    assert gql.names() == ["SavePipelineProject", "PipelineCreate"]
    # One document for both ways of naming the project: projects(ids:) here, project(fullPath:) skipped.
    assert gql.variables("SavePipelineProject") == [
        {"byId": True, "fullPath": "", "projectIds": ["gid://gitlab/Project/42"]}
    ]
    assert gql.variables("PipelineCreate")[0]["input"]["projectPath"] == PROJECT


async def test_create_in_a_missing_numeric_project_is_not_found_without_mutation(
    env: ToolEnv, gql: GraphQL
) -> None:
    gql.on("SavePipelineProject", {"data": {"projects": {"nodes": []}}})
    err = error(await env.call("save_pipeline", {"project_id": "777", "ref": "main"}))
    assert err["reason"] == "not_found"
    assert err["message"] == (
        "Project '777' not found or inaccessible. Check the ID or full path (e.g. group/project)."
    )
    assert gql.names() == ["SavePipelineProject"]


async def test_create_where_gitlab_hides_the_project_is_not_found(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCreate", NOT_AVAILABLE)
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}))
    assert err["reason"] == "not_found"
    assert err["message"] == (
        "Project 'grp/sub/proj' not found, or this token may not run pipelines in it (GitLab does not say "
        "which). Check the project and the token's access (Developer role or higher)."
    )
    assert gql.names() == ["PipelineCreate"]


@pytest.mark.parametrize(
    ("url", "expected_path"),
    [
        (f"{GITLAB}/grp/sub/proj", PROJECT),
        (f"{GITLAB}/grp/sub/proj/", PROJECT),
        (f"{GITLAB}/grp/sub/proj/-/pipelines/12?scope=all", PROJECT),
        (f"{GITLAB}/grp/sub/proj/-/tree/main#readme", PROJECT),
        ("https://GITLAB.example.com:443/grp/sub/proj", PROJECT),
        (f"{GITLAB}/grp%2Fsub/proj", PROJECT),  # encoded once: decoded once
    ],
)
async def test_create_by_url_on_the_configured_gitlab(
    env: ToolEnv, gql: GraphQL, url: str, expected_path: str
) -> None:
    gql.on("PipelineCreate", payload("pipelineCreate", pipeline()))
    ok(await env.call("save_pipeline", {"url": url, "ref": "main"}))
    assert gql.variables("PipelineCreate")[0]["input"]["projectPath"] == expected_path


HINT = " Or pass `project_id` (ID or full path) instead of `url`."


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "https://evil.example.com/grp/sub/proj",
            "The URL 'https://evil.example.com/grp/sub/proj' is not on this gateway's GitLab "
            "(https://gitlab.example.com), so nothing was fetched: host, port and path must match. Give a "
            "URL on that GitLab, such as https://gitlab.example.com/<group>/<project>." + HINT,
        ),
        (
            "https://gitlab.example.com:8443/grp/sub/proj",
            "The URL 'https://gitlab.example.com:8443/grp/sub/proj' is not on this gateway's GitLab "
            "(https://gitlab.example.com), so nothing was fetched: host, port and path must match. Give a "
            "URL on that GitLab, such as https://gitlab.example.com/<group>/<project>." + HINT,
        ),
        (
            "ftp://gitlab.example.com/grp/sub/proj",
            "The URL 'ftp://gitlab.example.com/grp/sub/proj' is not on this gateway's GitLab: only its "
            "http(s) URLs are followed; give one such as https://gitlab.example.com/<group>/<project>."
            + HINT,
        ),
        (
            "https://user:pw@gitlab.example.com/grp/sub/proj",
            # The password is a secret: the answer quotes the URL redacted, as the logs do.
            "The URL 'https://[REDACTED]@gitlab.example.com/grp/sub/proj' is not on this gateway's GitLab as "
            "written: it carries a user name or password (`user@`), which the gateway never follows. Give "
            "the plain URL, such as https://gitlab.example.com/<group>/<project>." + HINT,
        ),
        (
            "https://evil.com\\@gitlab.example.com/grp/sub/proj",
            "The URL 'https://evil.com\\\\@gitlab.example.com/grp/sub/proj' is not on this gateway's GitLab "
            "as written: it carries a user name or password (`user@`), which the gateway never follows. Give "
            "the plain URL, such as https://gitlab.example.com/<group>/<project>." + HINT,
        ),
        (
            "https://gitlab.example.com/grp%252Fsub/proj",
            "Project path 'grp%252Fsub/proj' looks URL-encoded twice; send it plain (`group/project`) or "
            "encoded once (`group%2Fproject`)." + HINT,
        ),
        (
            "https://gitlab.example.com/groups/grp/-/pipelines",
            "The URL 'https://gitlab.example.com/groups/grp/-/pipelines' is a group page, not a project's; "
            "give one such as https://gitlab.example.com/<group>/<project>." + HINT,
        ),
        (
            "https://gitlab.example.com/",
            "The URL 'https://gitlab.example.com/' names no project; give one such as "
            "https://gitlab.example.com/<group>/<project>." + HINT,
        ),
    ],
)
async def test_create_by_foreign_or_unusable_url_is_refused_before_any_request(
    env: ToolEnv, route: respx.Route, url: str, message: str
) -> None:
    err = error(await env.call("save_pipeline", {"url": url, "ref": "main"}))
    assert err == {"reason": "bad_request", "message": message}
    assert route.call_count == 0


async def test_url_must_be_under_the_configured_sub_path(make_settings: Callable[..., Settings]) -> None:
    sub = GraphQL()
    sub.on("PipelineCreate", payload("pipelineCreate", pipeline()))
    with respx.mock(assert_all_mocked=True) as router:
        route = router.post("https://h.example/gitlab/api/graphql").mock(side_effect=sub)
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(gitlab={"url": "https://h.example/gitlab/"}), http)
            err = error(await env.call("save_pipeline", {"url": "https://h.example/grp/proj", "ref": "main"}))
            assert err["reason"] == "bad_request" and "https://h.example/gitlab" in err["message"]
            err = error(
                await env.call("save_pipeline", {"url": "https://h.example/gitlabx/grp/proj", "ref": "m"})
            )
            assert err["reason"] == "bad_request"
            assert route.call_count == 0
            ok(
                await env.call(
                    "save_pipeline", {"url": "https://h.example/gitlab/grp/proj/-/pipelines", "ref": "m"}
                )
            )
    assert sub.variables("PipelineCreate")[0]["input"]["projectPath"] == "grp/proj"


async def test_payload_errors_are_bad_request_in_gitlabs_words(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCreate", payload("pipelineCreate", None, ["Reference not found"]))
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "nope"}))
    assert err["reason"] == "bad_request"
    assert err["gitlab_errors"] == ["Reference not found"]
    assert gql.names() == ["PipelineCreate"]


async def test_an_unknown_ref_gets_a_next_step(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCreate", payload("pipelineCreate", None, ["Reference not found"]))
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "mian"}))
    assert err["message"].startswith("GitLab did not create the pipeline: Reference not found. `ref` 'mian' ")
    assert "refs are case-sensitive" in err["message"]
    assert "list_pipelines with project_id" in err["message"]
    assert err["invalid_arguments"] == ["ref"]


async def test_yaml_errors_are_joined(env: ToolEnv, gql: GraphQL) -> None:
    errors = ["jobs:build config contains unknown keys: scrip", "Input `environment` is missing"]
    gql.on("PipelineCreate", payload("pipelineCreate", None, errors))
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}))
    assert err["message"] == (
        "GitLab did not create the pipeline: jobs:build config contains unknown keys: scrip; "
        "Input `environment` is missing"
    )


MAYBE_CREATED = (
    "GitLab did not confirm the pipeline creation (the request failed after it may have reached GitLab), "
    "so the gateway did not send it again: a pipeline for ref 'main' in project 'grp/sub/proj' may or may "
    "not have been created. Check before calling save_pipeline again: open "
    "https://gitlab.example.com/grp/sub/proj/-/pipelines?ref=main (or call REST "
    "GET /api/v4/projects/grp%2Fsub%2Fproj/pipelines?ref=main&order_by=id&sort=desc) and look for a "
    "pipeline created in the last few minutes; with its ID, get_pipeline (project_id='grp/sub/proj', "
    "pipeline_id=<ID>) shows its status. Only if there is none, create it again."
)


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("connection reset"),
        httpx.Response(502, text="Bad Gateway"),
        httpx.Response(503, json={"message": "unavailable"}),
        httpx.Response(500, json={"message": "boom"}),
    ],
    ids=["read-timeout", "reset", "502", "503", "500"],
)
async def test_create_that_may_have_reached_gitlab_is_sent_exactly_once(
    env: ToolEnv, gql: GraphQL, route: respx.Route, failure: Any
) -> None:
    gql.on("PipelineCreate", failure, payload("pipelineCreate", pipeline()))
    result = await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"})
    assert result["structuredContent"]["error"]["request_id"] == "req-test-1"
    err = error(result)
    assert route.call_count == 1
    assert err["reason"] == "upstream_error"
    assert err["outcome"] == "unknown"
    assert err["message"] == MAYBE_CREATED
    assert env.sleeps == []


async def test_create_is_resent_only_when_it_never_left_the_gateway(
    env: ToolEnv, gql: GraphQL, route: respx.Route
) -> None:
    gql.on("PipelineCreate", httpx.ConnectError("refused"), payload("pipelineCreate", pipeline()))
    out = ok(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}))
    assert out["id"] == PIPELINE_ID
    assert route.call_count == 2


async def test_create_answered_without_pipeline_or_error_says_outcome_unknown(
    env: ToolEnv, gql: GraphQL
) -> None:
    gql.on("PipelineCreate", payload("pipelineCreate", None))
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}))
    assert err["reason"] == "upstream_error" and err["outcome"] == "unknown"
    assert err["message"].startswith(
        "GitLab answered pipelineCreate with neither a pipeline nor an error, so the gateway did not send it "
        "again: a pipeline for ref 'main' in project 'grp/sub/proj' may or may not have been created."
    )


@pytest.mark.parametrize(
    "answer",
    [
        {"data": {"pipelineCreate": None}},
        {"data": {"pipelineCreate": None}, "errors": [{"message": "Internal server error"}]},
        httpx.Response(200, content=b"<oops", headers={"Content-Type": "application/json"}),
    ],
    ids=["null-payload", "errors-with-data", "not-json"],
)
async def test_create_answered_without_a_payload_is_sent_once_and_says_outcome_unknown(
    env: ToolEnv, gql: GraphQL, route: respx.Route, answer: Any
) -> None:
    gql.on("PipelineCreate", answer, payload("pipelineCreate", pipeline()))
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}))
    assert route.call_count == 1
    assert err["reason"] == "upstream_error" and err["outcome"] == "unknown"
    assert "may or may not have been created" in err["message"]
    assert "try again later" not in err["message"]


async def test_retry_answered_without_a_payload_says_outcome_unknown(
    env: ToolEnv, gql: GraphQL, route: respx.Route
) -> None:
    gql.on("PipelineRetry", {"data": {"pipelineRetry": None}})
    err = error(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "retry"}))
    assert route.call_count == 1
    assert err["reason"] == "upstream_error" and err["outcome"] == "unknown"
    assert err["message"].startswith("GitLab answered pipelineRetry without a payload, so the gateway")


async def test_create_web_url_falls_back_to_the_configured_gitlab(env: ToolEnv, gql: GraphQL) -> None:
    pipe = pipeline()
    pipe["project"] = None
    gql.on("PipelineCreate", payload("pipelineCreate", pipe))
    out = ok(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}))
    assert out["web_url"] == f"{GITLAB}/{PROJECT}/-/pipelines/{PIPELINE_ID}"


# -- preconditions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"project_id": PROJECT, "url": PROJECT_WEB, "ref": "main"},
            "Provide exactly one of `url` or `project_id`, not both: they both name the project.",
        ),
        (
            {"pipeline_id": PIPELINE_ID, "action": "create", "ref": "main"},
            'action "create" starts a new pipeline and takes no `pipeline_id`. Omit `pipeline_id` to create '
            'one (with `ref` and `project_id` or `url`), or pass action "retry" or "cancel" to act on '
            f"pipeline {PIPELINE_ID}.",
        ),
        (
            {"project_id": PROJECT, "action": "retry"},
            'action "retry" needs `pipeline_id`: the ID of the pipeline to retry. To create a new pipeline, '
            "omit `action` and pass `ref` with `project_id` or `url`.",
        ),
        (
            {"action": "cancel"},
            'action "cancel" needs `pipeline_id`: the ID of the pipeline to cancel. To create a new '
            "pipeline, omit `action` and pass `ref` with `project_id` or `url`.",
        ),
        (
            {"pipeline_id": PIPELINE_ID},
            'Provide action: "retry" or "cancel" when `pipeline_id` is set. To create a new pipeline, omit '
            "`pipeline_id` and pass `ref` with `project_id` or `url`.",
        ),
        (
            {"pipeline_id": PIPELINE_ID, "action": "retry", "variables": [{"key": "A", "value": "1"}]},
            "`variables` only applies when creating a pipeline; retry reuses the pipeline's own ref, "
            "variables and inputs. Remove `variables`, or omit `pipeline_id` and `action` to create a new "
            "pipeline.",
        ),
        (
            {"pipeline_id": PIPELINE_ID, "action": "cancel", "inputs": {"a": 1}, "variables": []},
            "`variables` and `inputs` only apply when creating a pipeline; cancel reuses the pipeline's own "
            "ref, variables and inputs. Remove `variables` and `inputs`, or omit `pipeline_id` and "
            "`action` to create a new pipeline.",
        ),
        (
            {"pipeline_id": PIPELINE_ID, "action": "retry", "ref": "main"},
            "`ref` only applies when creating a pipeline; retry reuses the pipeline's own ref, variables and "
            "inputs. Remove `ref`, or omit `pipeline_id` and `action` to create a new pipeline.",
        ),
        (
            {"project_id": PROJECT},
            '`ref` is required to create a pipeline: the branch or tag to run it on, e.g. "main".',
        ),
        (
            {"project_id": PROJECT, "ref": "  "},
            '`ref` is required to create a pipeline: the branch or tag to run it on, e.g. "main".',
        ),
        (
            {"ref": "main"},
            "Creating a pipeline needs its project: pass `project_id` (ID or full path, e.g. "
            "group/project) or `url` (the project's URL).",
        ),
        ({}, '`ref` is required to create a pipeline: the branch or tag to run it on, e.g. "main".'),
        (
            {
                "project_id": PROJECT,
                "ref": "main",
                "variables": [{"key": "A", "value": "1"}, {"key": "A", "value": "2"}],
            },
            "Variable `A` is given twice in `variables`; give each key once.",
        ),
    ],
    ids=[
        "url-and-project",
        "create-with-pipeline",
        "retry-without-pipeline",
        "cancel-without-pipeline",
        "pipeline-without-action",
        "variables-on-retry",
        "inputs-on-cancel",
        "ref-on-retry",
        "create-without-ref",
        "create-blank-ref",
        "create-without-project",
        "nothing",
        "duplicate-variable",
    ],
)
async def test_preconditions_each_have_their_own_message_and_send_nothing(
    env: ToolEnv, route: respx.Route, arguments: dict[str, Any], message: str
) -> None:
    err = error(await env.call("save_pipeline", arguments))
    assert err == {"reason": "bad_request", "message": message}
    assert route.call_count == 0


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (
            {"pipeline_id": PIPELINE_ID, "action": "update"},
            '`action`: save_pipeline does not rename pipelines ("update"): it creates, retries and cancels.',
        ),
        (
            {"pipeline_id": PIPELINE_ID, "action": "delete"},
            "`action`: Input should be 'create', 'retry' or 'cancel'",
        ),
        (
            {"pipeline_id": True, "action": "retry"},
            "`pipeline_id`: must be a positive integer such as 987654",
        ),
        (
            {"pipeline_id": 0, "action": "retry"},
            "`pipeline_id`: must be a positive integer such as 987654, not 0",
        ),
        ({"project_id": 0, "ref": "main"}, "`project_id`: project ID 0 must be a positive integer"),
        (
            {"project_id": "grp/../proj", "ref": "main"},
            "`project_id`: Project path 'grp/../proj' has empty, `.` or `..` segments",
        ),
        (
            {"project_id": PROJECT, "ref": "main", "variables": [{"key": "A"}]},
            "`variables.0.value` is required",
        ),
        (
            {
                "project_id": PROJECT,
                "ref": "main",
                "variables": [{"key": "A", "value": "1", "variable_type": "x"}],
            },
            "`variables.0.variable_type`: Input should be 'env_var' or 'file'",
        ),
        ({"project_id": PROJECT, "ref": "main", "name": "x"}, "unknown argument `name`"),
    ],
)
async def test_invalid_arguments_are_refused_before_any_request(
    env: ToolEnv, route: respx.Route, arguments: dict[str, Any], fragment: str
) -> None:
    err = error(await env.call("save_pipeline", arguments))
    assert err["reason"] == "bad_request"
    assert fragment in err["message"]
    assert route.call_count == 0


# -- retry ------------------------------------------------------------------------------------------


async def test_retry_sends_the_pipeline_global_id(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineRetry", payload("pipelineRetry", pipeline("RUNNING", "main")))
    out = ok(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "retry"}))
    assert out == {
        "action": "retry",
        "id": PIPELINE_ID,
        "status": "running",
        "ref": "main",
        "web_url": f"{PROJECT_WEB}/-/pipelines/{PIPELINE_ID}",
    }
    assert gql.names() == ["PipelineRetry"]
    assert gql.variables("PipelineRetry") == [{"id": f"gid://gitlab/Ci::Pipeline/{PIPELINE_ID}"}]


async def test_retry_refused_by_gitlab_is_bad_request_in_its_words(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineRetry", payload("pipelineRetry", pipeline("SUCCESS"), ["Pipeline is not retryable"]))
    err = error(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "retry"}))
    assert err == {
        "reason": "bad_request",
        "message": f"GitLab did not retry pipeline {PIPELINE_ID}: Pipeline is not retryable",
        "gitlab_errors": ["Pipeline is not retryable"],
    }


async def test_retry_of_a_hidden_pipeline_is_not_found(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineRetry", NOT_AVAILABLE)
    err = error(await env.call("save_pipeline", {"pipeline_id": 5, "action": "retry"}))
    assert err == {
        "reason": "not_found",
        "message": "Pipeline 5 not found, or this token may not retry it (GitLab does not say which). Check "
        "`pipeline_id` (the ID shown in the pipeline's URL, not its IID).",
    }


@pytest.mark.parametrize(
    "failure", [httpx.ReadTimeout("timed out"), httpx.Response(504)], ids=["timeout", "504"]
)
async def test_retry_that_may_have_reached_gitlab_is_never_resent(
    env: ToolEnv, gql: GraphQL, route: respx.Route, failure: Any
) -> None:
    gql.on("PipelineRetry", failure, payload("pipelineRetry", pipeline("RUNNING")))
    err = error(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "retry"}))
    assert route.call_count == 1
    assert err["reason"] == "upstream_error" and err["outcome"] == "unknown"
    assert err["message"] == (
        "GitLab did not confirm the retry (the request failed after it may have reached GitLab), so the "
        "gateway did not send it again: retrying runs the pipeline's failed and canceled jobs anew, and "
        f"sending it twice could run them twice. The retry of pipeline {PIPELINE_ID} may or may not have "
        f"been applied. Check before calling save_pipeline again: get_pipeline (pipeline_id={PIPELINE_ID}, "
        "include=['jobs']) shows whether its failed jobs have new pending or running runs (status running "
        "or pending means the retry was applied)."
    )


async def test_retry_in_a_named_project_checks_the_pipeline_belongs_to_it(env: ToolEnv, gql: GraphQL) -> None:
    gql.on(
        "SavePipelineProject",
        project({"id": "gid://gitlab/Ci::Pipeline/1", "status": "FAILED", "ref": "main"}, with_pipeline=True),
    )
    gql.on("PipelineRetry", payload("pipelineRetry", pipeline("PENDING")))
    out = ok(
        await env.call(
            "save_pipeline", {"project_id": PROJECT, "pipeline_id": PIPELINE_ID, "action": "retry"}
        )
    )
    assert out["status"] == "pending"
    assert gql.names() == ["SavePipelineProject", "PipelineRetry"]
    assert gql.variables("SavePipelineProject") == [
        {
            "byId": False,
            "fullPath": PROJECT,
            "projectIds": [],
            "pipelineId": f"gid://gitlab/Ci::Pipeline/{PIPELINE_ID}",
            "withPipeline": True,
        }
    ]


async def test_retry_of_a_pipeline_outside_the_named_project_sends_no_mutation(
    env: ToolEnv, gql: GraphQL
) -> None:
    gql.on("SavePipelineProject", project(None, with_pipeline=True))
    err = error(await env.call("save_pipeline", {"url": PROJECT_WEB, "pipeline_id": 5, "action": "retry"}))
    assert err == {
        "reason": "not_found",
        "message": f"Pipeline 5 not found in project '{PROJECT}', or inaccessible. Check `pipeline_id`; "
        "pipeline IDs are global, so you may also omit `url`/`project_id`.",
    }
    assert gql.names() == ["SavePipelineProject"]


async def test_retry_with_a_timeout_names_the_project_in_the_check(env: ToolEnv, gql: GraphQL) -> None:
    gql.on(
        "SavePipelineProject",
        {
            "data": {
                "projects": {
                    "nodes": [
                        {
                            "fullPath": PROJECT,
                            "webUrl": PROJECT_WEB,
                            "pipeline": {"id": "x", "status": "FAILED", "ref": "m"},
                        },
                    ]
                }
            }
        },
    )
    gql.on("PipelineRetry", httpx.ReadTimeout("timed out"))
    err = error(await env.call("save_pipeline", {"project_id": 42, "pipeline_id": 7, "action": "retry"}))
    assert "get_pipeline (project_id='grp/sub/proj', pipeline_id=7, include=['jobs'])" in err["message"]
    assert gql.names() == ["SavePipelineProject", "PipelineRetry"]


# -- cancel -----------------------------------------------------------------------------------------


async def test_cancel_returns_the_canceling_pipeline(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCancel", payload("pipelineCancel", pipeline("CANCELING", "main")))
    out = ok(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "cancel"}))
    assert out == {
        "action": "cancel",
        "id": PIPELINE_ID,
        "status": "canceling",
        "ref": "main",
        "web_url": f"{PROJECT_WEB}/-/pipelines/{PIPELINE_ID}",
    }
    assert gql.variables("PipelineCancel") == [{"id": f"gid://gitlab/Ci::Pipeline/{PIPELINE_ID}"}]


async def test_cancel_refused_by_gitlab_is_bad_request_in_its_words(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCancel", payload("pipelineCancel", None, ["Pipeline is not cancelable"]))
    err = error(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "cancel"}))
    assert err["reason"] == "bad_request"
    assert err["message"] == f"GitLab did not cancel pipeline {PIPELINE_ID}: Pipeline is not cancelable"


async def test_cancel_of_a_hidden_pipeline_is_not_found(env: ToolEnv, gql: GraphQL) -> None:
    gql.on("PipelineCancel", NOT_AVAILABLE)
    err = error(await env.call("save_pipeline", {"pipeline_id": 5, "action": "cancel"}))
    assert err["reason"] == "not_found"
    assert err["message"].startswith("Pipeline 5 not found, or this token may not cancel it")


async def test_cancel_whose_outcome_is_unknown_is_sent_again(
    env: ToolEnv, gql: GraphQL, route: respx.Route
) -> None:
    gql.on("PipelineCancel", httpx.ReadTimeout("timed out"), payload("pipelineCancel", pipeline("CANCELED")))
    out = ok(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "cancel"}))
    assert out["status"] == "canceled"
    assert route.call_count == 2


async def test_resent_cancel_refused_says_the_first_may_have_worked(env: ToolEnv, gql: GraphQL) -> None:
    gql.on(
        "PipelineCancel", httpx.Response(502), payload("pipelineCancel", None, ["Pipeline is not cancelable"])
    )
    err = error(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "cancel"}))
    assert err["reason"] == "bad_request"
    assert err["message"] == (
        f"GitLab did not confirm the first cancel request for pipeline {PIPELINE_ID}, so the gateway sent it "
        "again, and GitLab answered: Pipeline is not cancelable. If the first request was applied the "
        "pipeline is already canceling or canceled: check with get_pipeline "
        f"(pipeline_id={PIPELINE_ID})."
    )


async def test_cancel_without_pipeline_in_answer_reads_it_back_from_the_named_project(
    env: ToolEnv, gql: GraphQL
) -> None:
    running = {"id": f"gid://gitlab/Ci::Pipeline/{PIPELINE_ID}", "status": "RUNNING", "ref": "main"}
    canceled = {**running, "status": "CANCELED"}
    gql.on("SavePipelineProject", project(running, with_pipeline=True), project(canceled, with_pipeline=True))
    gql.on("PipelineCancel", payload("pipelineCancel", None))
    out = ok(
        await env.call(
            "save_pipeline", {"project_id": PROJECT, "pipeline_id": PIPELINE_ID, "action": "cancel"}
        )
    )
    assert out == {
        "action": "cancel",
        "id": PIPELINE_ID,
        "status": "canceled",
        "ref": "main",
        "web_url": f"{PROJECT_WEB}/-/pipelines/{PIPELINE_ID}",
    }
    assert gql.names() == ["SavePipelineProject", "PipelineCancel", "SavePipelineProject"]


async def test_cancel_without_pipeline_in_answer_and_no_project_reports_what_is_known(
    env: ToolEnv, gql: GraphQL
) -> None:
    gql.on("PipelineCancel", payload("pipelineCancel", None))
    out = ok(await env.call("save_pipeline", {"pipeline_id": PIPELINE_ID, "action": "cancel"}))
    assert out == {"action": "cancel", "id": PIPELINE_ID, "status": None, "ref": None, "web_url": None}
