"""``list_repository_tree`` (https://docs.gitlab.com/api/repositories/#list-repository-tree): a
folder's entries or every path below it, paged; an unknown ref and a path that is no folder told."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from tests.unit.gitlab.tool_env import ToolEnv, error, ok
from tests.unit.tools.repository_files_fake import GRAPHQL_URL, FakeRepoGitLab

GITLAB = "https://gitlab.example.com"
PROJECT = "grp/sub/proj"
REPO = f"{GITLAB}/api/v4/projects/grp%2Fsub%2Fproj/repository"
TREE = [
    {"id": "a1", "name": "app", "type": "tree", "path": "app", "mode": "040000"},
    {"id": "a2", "name": "lib", "type": "tree", "path": "lib", "mode": "040000"},
    {"id": "a3", "name": "README.md", "type": "blob", "path": "README.md", "mode": "100644"},
    {"id": "a4", "name": "run.sh", "type": "blob", "path": "run.sh", "mode": "100755"},
    {"id": "a5", "name": "vendor", "type": "commit", "path": "vendor", "mode": "160000"},
]


@pytest.fixture
def fake() -> FakeRepoGitLab:
    """GitLab's GraphQL side: the project's Duo context exclusion rules (none unless a test sets them)."""
    return FakeRepoGitLab()


@pytest.fixture
async def env(
    make_settings: Callable[..., Settings], router: respx.MockRouter, fake: FakeRepoGitLab
) -> AsyncIterator[ToolEnv]:
    router.post(GRAPHQL_URL).mock(side_effect=fake.graphql)
    async with httpx.AsyncClient() as http:
        yield ToolEnv(make_settings(), http)


def paged(items: list[dict[str, Any]]) -> Callable[[httpx.Request], httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        page, size = int(request.url.params["page"]), int(request.url.params["per_page"])
        return httpx.Response(200, json=items[(page - 1) * size : page * size])

    return answer


async def test_the_entries_come_in_pages_with_their_types(env: ToolEnv, router: respx.MockRouter) -> None:
    route = router.get(f"{REPO}/tree").mock(side_effect=paged(TREE))
    out = ok(
        await env.call("list_repository_tree", {"project_id": PROJECT, "first": 2}), "list_repository_tree"
    )
    assert [e["path"] for e in out["entries"]] == ["app", "lib"] and out["entries"][0]["type"] == "tree"
    seen = [e["path"] for e in out["entries"]]
    while out["page_info"]["has_next_page"]:
        after = out["page_info"]["end_cursor"]
        # The page size of the first call is kept, whatever `first` says now.
        out = ok(
            await env.call("list_repository_tree", {"project_id": PROJECT, "after": after, "first": 50}),
            "list_repository_tree",
        )
        seen += [e["path"] for e in out["entries"]]
    assert seen == [e["path"] for e in TREE]  # no exclusion rules: nothing left out
    assert {e["type"] for e in out["entries"]} <= {"blob", "commit"}
    assert "ref" not in route.calls[0].request.url.params  # the default branch


async def test_ref_path_and_recursive_are_sent(env: ToolEnv, router: respx.MockRouter) -> None:
    route = router.get(f"{REPO}/tree").mock(
        return_value=httpx.Response(
            200, json=[{"name": "user.rb", "type": "blob", "path": "app/models/user.rb"}]
        )
    )
    args = {
        "project_id": PROJECT,
        "ref": "feature/x",
        "path": "/app/",
        "recursive": True,
    }  # `path`: GitLab's name
    out = ok(await env.call("list_repository_tree", args), "list_repository_tree")
    params = route.calls.last.request.url.params
    assert (params["ref"], params["path"], params["recursive"]) == ("feature/x", "app", "true")
    assert out["folder_path"] == "app" and out["entries"][0]["path"] == "app/models/user.rb"
    err = error(await env.call("list_repository_tree", {"project_id": PROJECT, "folder_path": "../etc"}))
    assert err["reason"] == "bad_request" and route.call_count == 1


async def test_an_unknown_ref_names_the_nearest_branches(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(f"{REPO}/tree").mock(return_value=httpx.Response(404, json={"message": "404 Tree Not Found"}))
    router.get(f"{REPO}/branches").mock(return_value=httpx.Response(200, json=[{"name": "main"}]))
    router.get(f"{REPO}/tags").mock(return_value=httpx.Response(200, json=[{"name": "v1.0"}]))
    err = error(await env.call("list_repository_tree", {"project_id": PROJECT, "ref": "mian"}))
    assert err["reason"] == "not_found" and err["kind"] == "ref_not_found" and err["nearest_refs"] == ["main"]
    assert (
        "'mian' is no branch, tag or commit SHA of the project (refs are case-sensitive)." in err["message"]
    )
    assert "Nearest branch and tag names: 'main'" in err["message"] and "pipeline" not in err["message"]


async def test_a_path_that_is_no_folder_is_said_so(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(f"{REPO}/tree").mock(return_value=httpx.Response(200, json=[]))
    out = ok(
        await env.call("list_repository_tree", {"project_id": PROJECT, "folder_path": "ap"}),
        "list_repository_tree",
    )
    assert out["entries"] == [] and "'ap' is no folder at this ref" in out["system_instruction"]
    router.get(f"{REPO}/tree").mock(
        return_value=httpx.Response(404, json={"message": "404 Project Not Found"})
    )
    err = error(await env.call("list_repository_tree", {"project_id": PROJECT}))
    assert err["reason"] == "not_found" and "Project 'grp/sub/proj' not found" in err["message"]


async def test_entries_excluded_from_ai_context_are_left_out_and_counted(
    env: ToolEnv, router: respx.MockRouter, fake: FakeRepoGitLab
) -> None:
    fake.exclusion_rules = ["*.pem", "secrets/", "!secrets/README.md"]
    tree = [
        {"name": "certs", "type": "tree", "path": "certs", "mode": "040000"},
        {"name": "secrets", "type": "tree", "path": "secrets", "mode": "040000"},
        {"name": "server.pem", "type": "blob", "path": "certs/server.pem", "mode": "100644"},
        {"name": "api-key.txt", "type": "blob", "path": "secrets/api-key.txt", "mode": "100644"},
        {"name": "README.md", "type": "blob", "path": "README.md", "mode": "100644"},
    ]
    router.get(f"{REPO}/tree").mock(return_value=httpx.Response(200, json=tree))
    out = ok(
        await env.call("list_repository_tree", {"project_id": PROJECT, "recursive": True}),
        "list_repository_tree",
    )
    assert [e["path"] for e in out["entries"]] == ["certs", "README.md"]
    assert out["excluded_from_ai_context"] == 3
    # The same rules as get_repository_file, which refuses what the listing left out.
    fake.add("certs/server.pem", "-----BEGIN CERTIFICATE-----\n")
    err = error(
        await env.call("get_repository_file", {"project_id": PROJECT, "file_path": "certs/server.pem"})
    )
    assert err["kind"] == "excluded"


async def test_a_folder_url_is_listed_with_its_ref_split_as_gitlab_splits_it(
    env: ToolEnv, router: respx.MockRouter, fake: FakeRepoGitLab
) -> None:
    router.get(f"{REPO}/tags").mock(side_effect=fake.tags_route)
    route = router.get(f"{REPO}/tree").mock(return_value=httpx.Response(200, json=TREE[:1]))

    async def listed(url: str) -> tuple[dict[str, Any], dict[str, str]]:
        out = ok(await env.call("list_repository_tree", {"url": url}), "list_repository_tree")
        return out, dict(route.calls.last.request.url.params)

    # A branch with a slash, then a folder: the ref names starting with `my-topic` decide.
    out, sent = await listed(f"{GITLAB}/{PROJECT}/-/tree/my-topic/with-slash/app/models")
    assert (out["ref"], out["folder_path"]) == ("my-topic/with-slash", "app/models")
    assert (sent["ref"], sent["path"]) == ("my-topic/with-slash", "app/models")
    # A ref alone (the longer branch wins where branches and tags both exist), a plain ref's root,
    # and the project's own page (the default branch's root); `project_id` may repeat the url's.
    out, sent = await listed(f"{GITLAB}/{PROJECT}/-/tree/feature/with-slash")
    assert (out["ref"], out["folder_path"], "path" in sent) == ("feature/with-slash", None, False)
    out, sent = await listed(f"{GITLAB}/{PROJECT}/-/tree/main/")
    assert (out["ref"], out["folder_path"]) == ("main", None)
    both = {"url": f"{GITLAB}/{PROJECT}", "project_id": PROJECT, "folder_path": "lib"}
    out = ok(await env.call("list_repository_tree", both), "list_repository_tree")
    sent = dict(route.calls.last.request.url.params)
    assert (out["ref"], out["folder_path"], "ref" in sent, sent["path"]) == (None, "lib", False, "lib")


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"url": "https://gitlab.other.example/grp/sub/proj/-/tree/main"}, "is not on this gateway's GitLab"),
        ({"url": f"{GITLAB}/{PROJECT}/-/blob/main/README.md"}, "read the file with get_repository_file"),
        ({"url": f"{GITLAB}/{PROJECT}/-/pipelines/7"}, "is not a folder (/-/tree/) URL"),
        ({"url": f"{GITLAB}/{PROJECT}/-/tree/main/../../etc"}, "no `.` or `..` segments"),
        ({"url": f"{GITLAB}/{PROJECT}", "project_id": "grp/other"}, "Project mismatch"),
        ({"url": f"{GITLAB}/{PROJECT}/-/tree/main/app", "folder_path": "lib"}, "leave folder_path out"),
        ({"url": f"{GITLAB}/{PROJECT}/-/tree/main/app", "ref": "v1.0.0"}, "Ref mismatch"),
        ({}, "Provide project_id (or the url"),
    ],
)
async def test_a_url_that_cannot_be_listed_is_refused_before_any_request(
    env: ToolEnv, router: respx.MockRouter, arguments: dict[str, Any], said: str
) -> None:
    route = router.get(f"{REPO}/tree").mock(return_value=httpx.Response(200, json=TREE))
    err = error(await env.call("list_repository_tree", arguments))
    assert err["reason"] == "bad_request" and said in err["message"], err
    assert route.calls.call_count == 0
