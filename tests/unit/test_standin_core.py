"""The GitLab stand-in's building blocks, without a process: data set, paging, refs, paths, CI config."""

from __future__ import annotations

import asyncio
from collections import Counter
from functools import cache
from typing import Any

import pytest
from graphql import GraphQLError

from tests.conftest import GITLAB_SCHEMA
from tests.standin import content
from tests.standin import dataset as ds
from tests.standin.graphql_api import (
    Connection,
    GraphQLEndpoint,
    decode_cursor,
    encode_cursor,
    human_size,
    load_schema,
    parse_ci_config,
    valid_ref_name,
)
from tests.standin.models import Access, Blob
from tests.standin.rest_api import split_raw_path
from tests.standin.server import create_app


@cache
def endpoint() -> GraphQLEndpoint:
    return GraphQLEndpoint(load_schema(GITLAB_SCHEMA))


# -- data set -------------------------------------------------------------------------------------


def test_main_pipeline_has_the_documented_jobs() -> None:
    world = ds.build_world()
    pipeline = world.pipelines[ds.PIPELINE_ID]
    builds = [j for j in pipeline.jobs if j.kind == "BUILD"]
    bridges = [j for j in pipeline.jobs if j.kind == "BRIDGE"]
    assert [j.id for j in builds] == ds.BUILD_JOB_IDS
    assert Counter(j.status for j in builds) == ds.BUILD_STATUS_COUNTS
    assert [j.id for j in builds if j.status == "FAILED"] == ds.FAILED_JOB_IDS == [5010, 5024, 5040]
    assert {j.stage for j in builds} == set(ds.STAGES)
    assert [(b.id, b.downstream_pipeline_id) for b in bridges] == [
        (ds.BRIDGE_CHILD_JOB_ID, ds.CHILD_PIPELINE_ID),
        (ds.BRIDGE_PRIVATE_JOB_ID, ds.PRIVATE_PIPELINE_ID),
    ]
    downstream = world.downstream_of(pipeline)
    alice = world.user_for_token(ds.ALICE_TOKEN)
    readable = [p.id for p in downstream if world.projects[p.project_id].can_read(alice)]
    assert [p.id for p in downstream] == [ds.CHILD_PIPELINE_ID, ds.PRIVATE_PIPELINE_ID]
    assert readable == [ds.CHILD_PIPELINE_ID]


def test_tokens_and_access() -> None:
    world = ds.build_world()
    assert world.user_for_token(ds.REVOKED_TOKEN) is None
    alice, bob, carol = (world.user_for_token(t) for t in (ds.ALICE_TOKEN, ds.BOB_TOKEN, ds.CAROL_TOKEN))
    proj, private, public = (
        world.projects[i] for i in (ds.PROJECT_ID, ds.PRIVATE_PROJECT_ID, ds.PUBLIC_PROJECT_ID)
    )
    assert proj.access(alice) == Access.DEVELOPER and proj.can_update_pipeline(alice)
    assert proj.can_read(carol) and not proj.can_update_pipeline(carol)
    assert not private.can_read(alice) and private.can_read(bob)
    assert public.can_read(None) and not proj.can_read(None)
    assert not world.workflows[ds.WORKFLOWS["private"]].can_read(alice, private)


def test_every_documented_ref_resolves_to_its_sha() -> None:
    repo = ds.build_world().projects[ds.PROJECT_ID].repository
    for ref, sha in ds.REF_SHAS.items():
        commit = repo.resolve(ref, "TAGS" if ref == "v1.0" else "HEADS")
        assert commit is not None and commit.sha == sha, ref
        assert len(sha) == 40
    assert sorted(repo.branches) == sorted(ds.BRANCHES)
    assert sorted(repo.tags) == sorted(ds.TAGS)
    assert "my-topic" not in repo.branches and "feature" in repo.branches


def test_ref_resolution_order() -> None:
    repo = ds.build_world().projects[ds.PROJECT_ID].repository
    # A tag wins over a branch of the same name (git rev-parse), unless the type is given.
    assert repo.resolve("release").sha == ds.COMMITS["release-tag"]  # type: ignore[union-attr]
    assert repo.resolve("release", "HEADS").sha == ds.COMMITS["release"]  # type: ignore[union-attr]
    assert repo.resolve("refs/heads/release").sha == ds.COMMITS["release"]  # type: ignore[union-attr]
    assert repo.resolve("main", "TAGS") is None
    assert repo.resolve("HEAD").sha == ds.COMMITS["main"]  # type: ignore[union-attr]
    assert repo.resolve(ds.COMMITS["feature"][:7]).sha == ds.COMMITS["feature"]  # type: ignore[union-attr]
    assert repo.resolve("zzz") is None


def test_commit_file_moves_only_the_branch() -> None:
    repo = ds.build_world().projects[ds.PROJECT_ID].repository
    new = repo.commit_file("main", "README.md", Blob.of("new\n"), "Change README")
    assert repo.branches["main"] == new.sha != ds.COMMITS["main"]
    assert repo.commits[ds.COMMITS["main"]].tree["README.md"].data == ds.README_MAIN.encode()
    assert new.tree["README.md"].data == b"new\n"


# -- file contents --------------------------------------------------------------------------------


def test_mixed_text_file() -> None:
    data = content.mixed_text()
    text = data.decode("utf-8")
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) - 1 == content.MIXED_LINES
    assert sum(1 for line in lines[:-1] if line.endswith("\r")) == content.MIXED_LINES // 7
    assert len(text.splitlines()) != content.MIXED_LINES  # \f and U+2028 trap str.splitlines
    assert any(len(line.encode()) != len(line) for line in lines)  # multi-byte UTF-8
    assert len(data) > len(text)


def test_ten_mib_file_line_layout() -> None:
    data = content.ten_mib_text()
    assert len(data) == content.TEN_MIB == 10 * 1024 * 1024
    lines = data.split(b"\n")
    assert len(lines) - 1 == content.TEN_MIB_LINES and lines[-2] == b"end"
    assert lines[1_000_000] == b"L1000001" and lines[1_000_500] == b"L1000501"


def test_binary_lfs_and_truncated_blobs() -> None:
    tree = ds.build_world().projects[ds.PROJECT_ID].repository.commits[ds.COMMITS["main"]].tree
    png, lfs, truncated = tree[ds.FILES["png"]], tree[ds.FILES["lfs"]], tree[ds.FILES["truncated"]]
    assert png.data.startswith(b"\x89PNG\r\n\x1a\n") and png.is_binary and png.text() is None
    assert lfs.stored_externally and lfs.raw_size == content.LFS_OBJECT_SIZE and lfs.size == len(lfs.data)
    assert (
        truncated.raw_size == content.TRUNCATED_FULL_SIZE > len(truncated.data) == content.TRUNCATED_RETURNED
    )
    assert tree[ds.FILES["empty"]].text() == ""
    assert tree[ds.FILES["long_line"]].data.count(b"\n") == 0
    # The git blob id is what `git hash-object` computes.
    assert Blob.of(b"hello\n").oid == "ce013625030ba8dba906f756967f9e9ca394464a"


# -- GraphQL helpers ------------------------------------------------------------------------------


def _page(items: list[int], **args: Any) -> dict[str, Any]:
    conn = Connection(items, args, key=lambda i: i, view=lambda i: i)
    return {"nodes": conn.nodes(None), "pageInfo": conn.pageInfo(None)}  # type: ignore[arg-type]


def test_connection_caps_first_at_100_and_pages_by_cursor() -> None:
    items = list(range(1, 151))
    first = _page(items, first=500)
    assert len(first["nodes"]) == 100 and first["pageInfo"]["hasNextPage"] is True
    assert len(_page(items)["nodes"]) == 100
    rest = _page(items, first=100, after=first["pageInfo"]["endCursor"])
    assert rest["nodes"] == list(range(101, 151)) and rest["pageInfo"]["hasNextPage"] is False
    last = _page(items, last=3)
    assert last["nodes"] == [148, 149, 150] and last["pageInfo"]["hasPreviousPage"] is True
    assert _page(items, first=2, before=encode_cursor(3))["nodes"] == [1, 2]
    empty = _page(items, first=0)
    assert empty == {
        "nodes": [],
        "pageInfo": {"hasNextPage": True, "hasPreviousPage": False, "startCursor": None, "endCursor": None},
    }
    with pytest.raises(GraphQLError, match="greater than or equal to 0"):
        _page(items, first=-1)


def test_connection_redaction_keeps_page_info() -> None:
    conn = Connection([1, 2, 3], {"first": 2}, key=lambda i: i, view=lambda i: i, visible=lambda i: i != 2)
    assert conn.nodes(None) == [1]  # type: ignore[arg-type]
    assert conn.pageInfo(None)["hasNextPage"] is True  # type: ignore[arg-type]


def test_cursors_are_opaque_gitlab_style() -> None:
    assert encode_cursor(5001) == "eyJpZCI6IjUwMDEifQ"
    assert decode_cursor("eyJpZCI6IjUwMDEifQ") == "5001"
    for bad in ("not-a-cursor", "e30", ""):
        with pytest.raises(GraphQLError, match="Please provide a valid cursor"):
            decode_cursor(bad)


@pytest.mark.parametrize(
    ("ref", "valid"),
    [
        ("main", True),
        ("feature/other", True),
        ("v1.0", True),
        ("HEAD", True),
        ("refs/heads/main", False),
        ("-x", False),
        ("a..b", False),
        ("a b", False),
        ("a~1", False),
        ("x.lock", False),
        ("a//b", False),
        (".hidden", False),
        ("a/", False),
        ("", False),
    ],
)
def test_ref_names_are_checked_like_gitlab(ref: str, valid: bool) -> None:
    assert valid_ref_name(ref, allow_head=True) is valid


def test_human_size_like_rails() -> None:
    assert human_size(20 * 1024 * 1024) == "20 MB"
    assert human_size(21_180_416) == "20.2 MB"
    assert human_size(512) == "512 Bytes"


def test_ci_config_parsing() -> None:
    spec, config, error = parse_ci_config(content.CI_CONFIG.encode())
    assert error is None and set(spec or {}) == {"environment", "dry_run"}
    assert config is not None and config["stages"] == ["build", "test", "deploy"]
    assert parse_ci_config(content.BROKEN_CI_CONFIG.encode())[2] == ds.BROKEN_CI_ERROR
    syntax = parse_ci_config(b"stages: [build\njob: {")[2]
    assert syntax is not None and syntax.startswith("(<unknown>): ")


def test_raw_paths_are_decoded_once() -> None:
    assert split_raw_path("/projects/grp%2Fsub%2Fproj/repository/tags") == (
        ["projects", "grp/sub/proj", "repository", "tags"],
        [],
    )
    segments, doubled = split_raw_path("/projects/grp%252Fsub/repository/files/a%2Fb.txt")
    assert segments[1] == "grp%2Fsub" and segments[-1] == "a/b.txt" and doubled == ["grp%2Fsub"]


# -- the app in-process ---------------------------------------------------------------------------


async def test_in_process_app_validates_and_logs(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app(endpoint()))
    headers = {"PRIVATE-TOKEN": ds.ALICE_TOKEN}
    ok = await client.post("/api/graphql", json={"query": "{ currentUser { username } }"}, headers=headers)
    assert await ok.json() == {"data": {"currentUser": {"username": "alice"}}}
    bad = await client.post("/api/graphql", json={"query": "{ currentUser { nope } }"}, headers=headers)
    assert "errors" in await bad.json()
    invalid = await (await client.get("/_standin/invalid")).json()
    assert [i["seq"] for i in invalid["invalid"]] == [2]
    log = await (await client.get("/_standin/requests")).json()
    assert log["total"] == 2 and [r["graphql"][0]["valid"] for r in log["requests"]] == [True, False]
    refused = await client.post("/_standin/faults", json={"kind": "rate_limit", "match": {"bogus": "x"}})
    assert refused.status == 400 and "unknown match keys" in (await refused.json())["error"]


async def test_multiplexed_requests_and_string_variables(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app(endpoint(), prefix="/gitlab"))
    headers = {"PRIVATE-TOKEN": ds.BOB_TOKEN}
    query = "query($p: ID!) { project(fullPath: $p) { fullPath webUrl } }"
    batch = [
        {"query": query, "variables": {"p": ds.PRIVATE_PROJECT_PATH}},
        {"query": query, "variables": '{"p": "grp/public-proj"}'},
    ]
    answer = await (await client.post("/gitlab/api/graphql", json=batch, headers=headers)).json()
    host = f"http://{client.host}:{client.port}/gitlab"
    assert answer == [
        {
            "data": {
                "project": {
                    "fullPath": ds.PRIVATE_PROJECT_PATH,
                    "webUrl": f"{host}/{ds.PRIVATE_PROJECT_PATH}",
                }
            }
        },
        {
            "data": {
                "project": {"fullPath": ds.PUBLIC_PROJECT_PATH, "webUrl": f"{host}/{ds.PUBLIC_PROJECT_PATH}"}
            }
        },
    ]
    log = await (await client.get("/_standin/requests")).json()
    assert [op["variables"]["p"] for op in log["requests"][0]["graphql"]] == [
        ds.PRIVATE_PROJECT_PATH,
        ds.PUBLIC_PROJECT_PATH,
    ]
    root = await client.post("/api/graphql", json=batch[0], headers=headers)
    assert root.status == 404  # GitLab lives under /gitlab here


async def test_test_reports_summary_and_suite(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app(endpoint()))
    headers = {"PRIVATE-TOKEN": ds.ALICE_TOKEN}
    query = """query($p: ID!, $id: CiPipelineID!, $builds: [ID!]!) {
      project(fullPath: $p) { pipeline(id: $id) {
      testReportSummary { total { count failed error suiteError }
        testSuites(first: 5) { nodes { name buildIds failedCount errorCount } } }
      testSuite(buildIds: $builds) { name failedCount errorCount
        testCases(first: 3) { nodes { name classname file status stackTrace } } }
      none: testSuite(buildIds: ["999"]) { name } } } }"""
    variables = {
        "p": ds.PROJECT_PATH,
        "id": f"gid://gitlab/Ci::Pipeline/{ds.PIPELINE_ID}",
        "builds": [str(j) for j in ds.FAILED_JOB_IDS],
    }
    answer = await (
        await client.post("/api/graphql", json={"query": query, "variables": variables}, headers=headers)
    ).json()
    pipeline = answer["data"]["project"]["pipeline"]
    assert pipeline["testReportSummary"]["total"] == {
        "count": 30 * ds.RSPEC_TESTS_PER_JOB,
        "failed": 1,
        "error": 1,
        "suiteError": None,
    }
    (rspec,) = pipeline["testReportSummary"]["testSuites"]["nodes"]
    assert rspec["name"] == "rspec" and len(rspec["buildIds"]) == 30
    assert (rspec["failedCount"], rspec["errorCount"]) == (1, 1)
    suite = pipeline["testSuite"]
    assert (suite["name"], suite["failedCount"], suite["errorCount"]) == ("rspec", 1, 1)
    cases = suite["testCases"]["nodes"]
    assert [c["status"] for c in cases] == ["error", "failed", "success"]  # errors and failures first
    assert (
        cases[1]["name"] == ds.FAILING_TEST["name"]
        and cases[1]["stackTrace"] == ds.FAILING_TEST["stack_trace"]
    )
    assert pipeline["none"] is None


async def test_a_pipeline_change_can_be_scheduled(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app(endpoint()))
    pid = ds.RUNNING_PIPELINE_ID
    answer = await (
        await client.patch(f"/_standin/pipelines/{pid}", json={"status": "failed", "after_seconds": 0.1})
    ).json()
    assert answer["status"].lower() == "running" and answer["scheduled_in_seconds"] == 0.1
    refused = await client.patch(f"/_standin/pipelines/{pid}", json={"status": "done", "after_seconds": 0.1})
    assert refused.status == 400
    await asyncio.sleep(0.3)
    assert (await (await client.get(f"/_standin/pipelines/{pid}")).json())["status"].lower() == "failed"
