"""The tools on older GitLab versions and on GitLab CE, as a caller sees them.

GitLab is mocked with respx and checks every GraphQL document against the schema of the version
it plays (``tests/gitlab/band_schema.py``), answering with graphql-ruby's refusal when the document
names what that version lacks: a test fails if the gateway sends an older GitLab a field it does
not have. The version the gateway has learnt is set with ``@pytest.mark.gitlab_version`` (or left
unknown, and then learnt from GitLab's ``metadata``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx
from graphql import get_operation_ast, parse, validate

from gateway.config import Settings
from gateway.gitlab.credentials import ANONYMOUS
from gateway.gitlab.instance import READ_WAIT_SECONDS, REFRESH_SECONDS, GitLabInstance, InstanceInfo
from gateway.tools import all_tools
from gateway.tools.compatibility import limits_line
from tests.gitlab import versions
from tests.gitlab.band_schema import schema_for
from tests.standin.ruby_errors import ruby_errors
from tests.unit.gitlab.tool_env import ToolEnv, error, ok

GITLAB = "https://gitlab.example.com"
API = f"{GITLAB}/api/v4"
PROJECT = "grp/proj"
ENCODED = "grp%2Fproj"
PIPELINE_ID = 4321
SHA = "a" * 40


class BandGitLab:
    """respx side effect for ``/api/graphql``: a GitLab of one version and edition. A document
    that is not valid for its schema gets graphql-ruby's refusal (no data); a valid one gets the
    answer queued for its operation name."""

    def __init__(self, version: str, edition: versions.Edition) -> None:
        self.version, self.edition = version, edition
        self.answers: dict[str, list[Any]] = {}
        self.sent: list[dict[str, Any]] = []

    def on(self, operation: str, *answers: Any) -> BandGitLab:
        self.answers.setdefault(operation, []).extend(answers)
        return self

    def names(self) -> list[str]:
        return [body["operationName"] for body in self.sent]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.sent.append(body)
        document = parse(body["query"])
        errors = validate(schema_for(self.version, self.edition), document)
        if errors:
            return httpx.Response(200, json={"errors": ruby_errors(document, errors)})
        assert get_operation_ast(document, body["operationName"]) is not None
        if body["operationName"] == "InstanceMetadata":
            version = versions.version_string(self.version, self.edition)
            return httpx.Response(
                200, json={"data": {"metadata": {"version": version, "enterprise": self.edition == "ee"}}}
            )
        queue = self.answers.get(body["operationName"])
        assert queue, f"unexpected request {body['operationName']}"
        return httpx.Response(200, json=queue.pop(0))


@pytest.fixture
def band(request: pytest.FixtureRequest) -> BandGitLab:
    marker = request.node.get_closest_marker("band")
    version, edition = marker.args if marker is not None else (versions.NEWEST, "ee")
    assert edition in ("ee", "ce")
    return BandGitLab(version, "ee" if edition == "ee" else "ce")


@pytest.fixture
def router(band: BandGitLab) -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as mock:
        mock.post(f"{GITLAB}/api/graphql").mock(side_effect=band)
        yield mock


@pytest.fixture
async def env(make_settings: Callable[..., Settings], router: respx.MockRouter) -> Any:
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


def pipeline_node(status: str = "RUNNING") -> dict[str, Any]:
    return {
        "id": f"gid://gitlab/Ci::Pipeline/{PIPELINE_ID}",
        "status": status,
        "ref": "main",
        "sha": SHA,
        "source": "push",
        "path": f"/{PROJECT}/-/pipelines/{PIPELINE_ID}",
    }


# -- pipelines ------------------------------------------------------------------------------------


@pytest.mark.band("16.11", "ee")
@pytest.mark.gitlab_version("16.11.0-ee", enterprise=True)
async def test_get_pipeline_before_pipeline_by_id_reads_it_by_iid(
    env: ToolEnv, band: BandGitLab, router: respx.MockRouter
) -> None:
    rest = router.get(f"{API}/projects/{ENCODED}/pipelines/{PIPELINE_ID}").respond(
        200, json={"id": PIPELINE_ID, "iid": 17}
    )
    band.on(
        "getPipeline", {"data": {"project": {"id": "gid://gitlab/Project/1", "pipeline": pipeline_node()}}}
    )
    out = ok(await env.call("get_pipeline", {"project_id": PROJECT, "pipeline_id": PIPELINE_ID}))
    assert (out["id"], out["status"], out["sha"]) == (PIPELINE_ID, "running", SHA)
    assert rest.call_count == 1
    assert band.sent[0]["variables"]["pipelineIid"] == "17" and "pipelineId" not in band.sent[0]["variables"]


@pytest.mark.band("16.11", "ee")
@pytest.mark.gitlab_version("16.11.0-ee", enterprise=True)
async def test_get_pipeline_by_iid_says_not_found_for_a_pipeline_rest_does_not_show(
    env: ToolEnv, band: BandGitLab, router: respx.MockRouter
) -> None:
    router.get(f"{API}/projects/{ENCODED}/pipelines/{PIPELINE_ID}").respond(
        404, json={"message": "404 Not found"}
    )
    err = error(await env.call("get_pipeline", {"project_id": PROJECT, "pipeline_id": PIPELINE_ID}))
    assert err["reason"] == "not_found" and f"Pipeline {PIPELINE_ID} not found" in err["message"]
    assert band.sent == []


@pytest.mark.band("17.5", "ee")
@pytest.mark.gitlab_version("17.5.0-ee", enterprise=True)
async def test_create_before_pipeline_create_uses_rest_once(
    env: ToolEnv, band: BandGitLab, router: respx.MockRouter
) -> None:
    create = router.post(f"{API}/projects/{ENCODED}/pipeline").respond(
        201,
        json={
            "id": 99,
            "iid": 3,
            "status": "created",
            "ref": "main",
            "web_url": f"{GITLAB}/{PROJECT}/-/pipelines/99",
        },
    )
    args = {"project_id": PROJECT, "ref": "main", "variables": [{"key": "A", "value": "1"}]}
    out = ok(await env.call("save_pipeline", args), "save_pipeline")
    assert out == {
        "action": "create",
        "id": 99,
        "status": "created",
        "ref": "main",
        "web_url": f"{GITLAB}/{PROJECT}/-/pipelines/99",
    }
    assert create.call_count == 1 and band.sent == []
    assert json.loads(create.calls[0].request.content) == {
        "ref": "main",
        "variables": [{"key": "A", "value": "1", "variable_type": "env_var"}],
    }


@pytest.mark.band("17.5", "ee")
@pytest.mark.gitlab_version("17.5.0-ee", enterprise=True)
async def test_a_rest_create_gitlab_did_not_confirm_is_not_sent_again(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    create = router.post(f"{API}/projects/{ENCODED}/pipeline").respond(502)
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}))
    assert err["reason"] == "upstream_error" and err["outcome"] == "unknown"
    assert create.call_count == 1


@pytest.mark.band("17.5", "ee")
@pytest.mark.gitlab_version("17.5.0-ee", enterprise=True)
async def test_a_rest_create_on_an_unknown_ref_says_so_in_gitlabs_words(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.post(f"{API}/projects/{ENCODED}/pipeline").respond(
        400, json={"message": {"base": ["Reference not found"]}}
    )
    err = error(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "nope"}))
    assert err["reason"] == "bad_request" and err["invalid_arguments"] == ["ref"]
    assert err["gitlab_errors"] == ["Reference not found"]


@pytest.mark.band("17.8", "ee")
@pytest.mark.gitlab_version("17.8.1-ee", enterprise=True)
async def test_inputs_before_gitlab_has_them_are_refused_before_anything_is_sent(
    env: ToolEnv, band: BandGitLab
) -> None:
    err = error(
        await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main", "inputs": {"env": "x"}})
    )
    assert err["reason"] == "unsupported_by_gitlab"
    assert "`inputs` needs GitLab 17.10 or later" in err["message"] and "17.8.1 (EE)" in err["message"]
    assert err["needs"] == "GitLab 17.10 or later" and band.sent == []


@pytest.mark.band("17.5", "ee")
async def test_a_create_refused_as_unknown_reads_the_version_and_creates_with_rest_once(
    env: ToolEnv, band: BandGitLab, router: respx.MockRouter
) -> None:
    # The gateway believed the newest GitLab; GitLab refuses pipelineCreate before running
    # anything, says it is 17.5, and the pipeline is created with REST: one create in all.
    create = router.post(f"{API}/projects/{ENCODED}/pipeline").respond(
        201, json={"id": 99, "status": "created", "ref": "main", "web_url": None}
    )
    out = ok(await env.call("save_pipeline", {"project_id": PROJECT, "ref": "main"}), "save_pipeline")
    assert out["id"] == 99 and out["web_url"] == f"{GITLAB}/{PROJECT}/-/pipelines/99"
    assert band.names() == ["PipelineCreate", "InstanceMetadata"] and create.call_count == 1
    assert env.gitlab.instance.info.release == (17, 5)


@pytest.mark.band("17.11", "ce")
@pytest.mark.gitlab_version("17.11.2")
async def test_cancel_before_the_payload_has_the_pipeline_reads_it_back(
    env: ToolEnv, band: BandGitLab
) -> None:
    project = {"fullPath": PROJECT, "webUrl": f"{GITLAB}/{PROJECT}"}
    running = {"id": f"gid://gitlab/Ci::Pipeline/{PIPELINE_ID}", "status": "RUNNING", "ref": "main"}
    checked: dict[str, Any] = {**project, "pipeline": running}
    band.on("SavePipelineProject", {"data": {"project": checked}})
    band.on("PipelineCancel", {"data": {"pipelineCancel": {"errors": []}}})
    read_back = {**project, "pipeline": {**running, "status": "CANCELING"}}
    band.on("SavePipelineProject", {"data": {"project": read_back}})
    out = ok(
        await env.call(
            "save_pipeline", {"project_id": PROJECT, "pipeline_id": PIPELINE_ID, "action": "cancel"}
        ),
        "save_pipeline",
    )
    assert (out["status"], out["ref"]) == ("canceling", "main")
    assert band.names() == ["SavePipelineProject", "PipelineCancel", "SavePipelineProject"]


# -- Duo sessions and files -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "enterprise", "instance"),
    [
        # CE: a newer version would not help, so none is promised.
        ("18.5.0", False, "; this instance is GitLab 18.5.0 Community Edition (CE), which does not have it;"),
        ("18.2.0-ee", True, "; this GitLab is 18.2.0 (EE). It becomes available when GitLab is upgraded;"),
    ],
)
async def test_get_duo_session_where_gitlab_cannot_serve_it_says_what_it_needs(
    make_settings: Callable[..., Settings], version: str, enterprise: bool, instance: str
) -> None:
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as mock:
        graphql = mock.post(f"{GITLAB}/api/graphql")
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(), http)
            env.gitlab.instance.learnt(InstanceInfo.of(version, enterprise))
            err = error(await env.call("get_duo_session", {"workflow_id": 7}))
    assert err["reason"] == "unsupported_by_gitlab" and err["needs"] == "GitLab EE 18.4 or later"
    assert err["message"].startswith("get_duo_session needs GitLab Enterprise Edition (EE) 18.4 or later (")
    assert instance in err["message"] and "doesn't exist" not in err["message"]
    assert enterprise or "upgrade" not in err["message"]
    assert graphql.call_count == 0


@pytest.mark.band("17.5", "ee")
@pytest.mark.gitlab_version("17.5.3-ee", enterprise=True)
async def test_get_repository_file_before_commit_by_ref_reads_the_sha_with_rest(
    env: ToolEnv, band: BandGitLab, router: respx.MockRouter
) -> None:
    commit = router.get(f"{API}/projects/1/repository/commits/main").respond(200, json={"id": SHA})
    node = {
        "path": "a.txt",
        "rawSize": "3",
        "rawTextBlob": "hi\n",
        "storedExternally": False,
        "externalStorage": None,
    }
    band.on(
        "GetRepositoryFile",
        {
            "data": {
                "project": {
                    "id": "gid://gitlab/Project/1",
                    "fullPath": PROJECT,
                    "repository": {"empty": False, "blobs": {"nodes": [node]}},
                }
            }
        },
    )
    out = ok(
        await env.call("get_repository_file", {"project_id": PROJECT, "file_path": "a.txt", "ref": "main"}),
        "get_repository_file",
    )
    assert out["content"] == "hi\n" and out["commit_sha"] == SHA
    assert commit.call_count == 1


# -- learning the version ------------------------------------------------------------------------


@pytest.mark.band("17.5", "ee")
@pytest.mark.gitlab_version(None)
async def test_the_first_call_learns_the_version_and_the_metric_shows_it(
    env: ToolEnv, band: BandGitLab, router: respx.MockRouter
) -> None:
    # Passthrough mode: no start-up check with a token, so the first call asks.
    router.get(f"{API}/projects/{ENCODED}/pipelines/{PIPELINE_ID}").respond(200, json={"iid": 5})
    band.on(
        "getPipeline", {"data": {"project": {"id": "gid://gitlab/Project/1", "pipeline": pipeline_node()}}}
    )
    ok(await env.call("get_pipeline", {"project_id": PROJECT, "pipeline_id": PIPELINE_ID}))
    assert band.names() == ["InstanceMetadata", "getPipeline"]
    assert (
        env.metrics.registry.get_sample_value("gateway_gitlab_info", {"version": "17.5.0", "edition": "ee"})
        == 1.0
    )


@pytest.mark.gitlab_version(None)
async def test_a_caller_gitlab_tells_nothing_gets_the_newest_documents_and_is_not_asked_each_call(
    make_settings: Callable[..., Settings],
) -> None:
    empty = {"pipelines": {"nodes": [], "pageInfo": {"hasNextPage": False, "endCursor": None}}}
    with respx.mock(assert_all_mocked=True) as mock:
        version = mock.get(f"{API}/version").respond(401, json={"message": "401 Unauthorized"})
        graphql = mock.post(f"{GITLAB}/api/graphql").mock(
            side_effect=[
                httpx.Response(200, json={"data": {"metadata": None}}),  # anonymous: told nothing
                httpx.Response(200, json={"data": {"project": empty}}),
                httpx.Response(200, json={"data": {"project": empty}}),
            ]
        )
        async with httpx.AsyncClient() as http:
            env = ToolEnv(make_settings(gitlab={"token": None}), http)
            for _ in range(2):
                ok(
                    await env.call("list_pipelines", {"project_id": PROJECT}, credential=ANONYMOUS),
                    "list_pipelines",
                )
    assert version.call_count == 1 and graphql.call_count == 3  # asked once, not on every call
    assert not env.gitlab.instance.info.known


@pytest.mark.parametrize(
    ("version", "enterprise", "plain", "edition"),
    [
        ("17.5.0-ee", True, "17.5.0", "ee"),
        ("17.5.0-EE", None, "17.5.0", "ee"),
        ("17.5.0", False, "17.5.0", "ce"),
        ("19.4.0-pre", True, "19.4.0-pre", "ee"),
    ],
)
def test_the_version_is_plain_and_the_edition_apart(
    version: str, enterprise: bool | None, plain: str, edition: str
) -> None:
    info = InstanceInfo.of(version, enterprise)
    assert (info.version, info.edition.value) == (plain, edition)


@pytest.mark.gitlab_version(None)
async def test_the_version_is_read_again_after_the_refresh_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gateway.gitlab")
    now = [0.0]
    asked: list[str] = []

    class Session:
        async def graphql(self, operation: str, variables: Any, *, mutation: bool = False) -> dict[str, Any]:
            asked.append(operation)
            return {
                "metadata": {"version": "18.2.1-ee" if len(asked) == 1 else "18.5.0-ee", "enterprise": True}
            }

        async def rest(self, method: str, route: str, **kwargs: Any) -> Any:
            raise AssertionError("GraphQL answered")

    instance = GitLabInstance(clock=lambda: now[0])
    assert (await instance.current(Session())).release == (18, 2)
    now[0] = REFRESH_SECONDS - 1
    assert (await instance.current(Session())).release == (18, 2) and len(asked) == 1
    assert "GitLab version changed" not in caplog.text  # learnt, not changed
    now[0] = REFRESH_SECONDS + 1  # upgraded under the running gateway
    assert (await instance.current(Session())).release == (18, 5) and len(asked) == 2
    changed = [r.getMessage() for r in caplog.records if "GitLab version changed" in r.getMessage()]
    assert changed == ["GitLab version changed from 18.2.1 to 18.5.0"]


@pytest.mark.gitlab_version(None)
async def test_a_call_waits_half_a_second_at_most_for_a_slow_version_read() -> None:
    # GitLab slow to answer `metadata` must not spend the call's own deadline: the call goes on
    # with what is known (the newest documents), and the read finishes for the next call.
    answer = asyncio.Event()

    class Session:
        async def graphql(self, operation: str, variables: Any, *, mutation: bool = False) -> dict[str, Any]:
            await answer.wait()
            return {"metadata": {"version": "17.5.0", "enterprise": False}}

        async def rest(self, method: str, route: str, **kwargs: Any) -> Any:
            raise AssertionError("GraphQL answered")

    instance = GitLabInstance()
    started = time.monotonic()
    assert not (await instance.current(Session())).known
    assert time.monotonic() - started < READ_WAIT_SECONDS + 0.5
    answer.set()
    for _ in range(100):  # the read goes on without the call
        await asyncio.sleep(0.01)
        if instance.info.known:
            break
    assert instance.info.release == (17, 5)


def test_the_start_up_line_says_what_differs_on_an_older_gitlab() -> None:
    line = limits_line(all_tools(), InstanceInfo.of("16.11.4", False))
    assert "get_duo_session answers unsupported_by_gitlab (it needs GitLab EE 18.4 or later)" in line
    assert "get_pipeline: `exit_code` is null" in line and "`inputs` is refused" in line
    assert limits_line(all_tools(), InstanceInfo.of("19.4.0-pre", True)) == ""
