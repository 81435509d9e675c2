"""``get_repository_file`` end to end: the gateway as a process, the official MCP SDK client, and the
GitLab stand-in (its GraphQL validated against GitLab's schema; data set in ``tests/standin``).

What a user relies on: a 5,000-line file read in windows of 500 rebuilds the file byte for byte; a PNG
gives the binary result; a bad ref and a missing file give their two messages; a URL on another
host makes no request at all (the stand-in's request log stays empty). Plus the two URL cases
GitLab's tool documents, LFS, exclusions, and the cache (a window re-read at a commit SHA costs nothing).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from tests.e2e.harness import GatewayProcess, mcp_client, text_of
from tests.standin import content
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin, fresh_standin, standin  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e

TOOL = "get_repository_file"
P = ds.PROJECT_PATH


@pytest.fixture(scope="module")
def gateway(standin: Standin, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:  # noqa: F811
    """One gateway for the module (a start costs more than every call here): each test resets
    the stand-in (``fresh_standin``, below); the gateway caches reads at a commit SHA, which the
    seed never changes, and the one test that counts cached reads reads a file no other test
    reads."""
    proc = GatewayProcess(env=standin.env(), state_dir=tmp_path_factory.mktemp("files") / "state").start()
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def _seed_data(fresh_standin: Standin) -> None:  # noqa: F811
    """Every test starts from the stand-in's seed data, no faults, an empty request log."""


async def call(client: Client, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    """``(is_error, structuredContent)``; the JSON text block must say the same."""
    result = await client.call_tool(TOOL, arguments)
    structured = result.structured_content or {}
    assert json.loads(text_of(result.content[-1])) == structured
    return bool(result.is_error), structured


async def test_5000_lines_in_windows_of_500_rebuild_the_file(
    gateway: GatewayProcess,
    fresh_standin: Standin,  # noqa: F811
) -> None:
    expected = content.mixed_text()
    async with mcp_client(gateway.mcp_url) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == TOOL)
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        parts: list[str] = []
        args: dict[str, Any] = {"project_id": P, "file_path": ds.FILES["mixed"], "ref": "main", "limit": 500}
        sha = None
        while True:
            is_error, out = await call(client, **args)
            assert not is_error, out
            parts.append(out["content"])
            sha = out["commit_sha"]
            if "next" not in out:
                break
            assert out["next"]["limit"] == 500
            args["offset"] = out["next"]["offset"]
        assert len(parts) == 10
        assert "".join(parts).encode("utf-8") == expected
        assert out["metadata"]["total_lines"] == content.MIXED_LINES
        assert out["metadata"]["returned_lines"] == {"start": 4501, "end": 5000}
        assert fresh_standin.control.graphql_requests(operation="GetRepositoryFile") == 10

        # The same windows pinned to the commit SHA come from the gateway's cache: no request.
        fresh_standin.control.clear_requests()
        again = []
        for offset in range(0, 5000, 500):
            _, out = await call(
                client, project_id=P, file_path=ds.FILES["mixed"], ref=sha, offset=offset, limit=500
            )
            again.append(out["content"])
        assert "".join(again).encode("utf-8") == expected
        assert fresh_standin.control.request_count() == 0

        # By numeric project ID (a branch, so not from the cache): the same document, through
        # projects(ids:), still one request.
        is_error, out = await call(
            client, project_id=ds.PROJECT_ID, file_path=ds.FILES["mixed"], ref="main", limit=500
        )
        assert not is_error and out["content"] == parts[0]
        assert fresh_standin.control.request_count() == 1
        assert fresh_standin.control.graphql_requests(operation="GetRepositoryFile") == 1


async def test_png_gives_the_binary_result_and_lfs_its_own(gateway: GatewayProcess) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        is_error, out = await call(client, project_id=P, file_path=ds.FILES["png"], ref="main")
        assert is_error
        size = len(content.png_bytes())
        assert out["error"]["message"] == (
            f"File 'assets/logo.png' is binary and cannot be returned as text. Size: {size} bytes."
        )
        assert (out["error"]["kind"], out["error"]["size_bytes"]) == ("binary", size)
        is_error, out = await call(client, project_id=P, file_path=ds.FILES["lfs"], ref="main")
        assert is_error and out["error"]["kind"] == "lfs"
        assert out["error"]["message"].endswith(f"Size: {content.LFS_OBJECT_SIZE} bytes.")


async def test_bad_ref_and_missing_file_give_their_two_messages(
    gateway: GatewayProcess,
    fresh_standin: Standin,  # noqa: F811
) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        fresh_standin.control.clear_requests()
        is_error, out = await call(client, project_id=P, file_path="README.md", ref="no-such-branch")
        assert is_error
        assert out["error"]["message"] == (
            "Ref 'no-such-branch' not found. Provide an existing branch name, tag name, or commit SHA, or "
            "use HEAD for the default branch."
        )
        assert fresh_standin.control.request_count() <= 2
        fresh_standin.control.clear_requests()
        is_error, out = await call(client, project_id=P, file_path="src/nope.py", ref="main")
        assert is_error
        assert out["error"]["message"] == (
            "File 'src/nope.py' does not exist at ref 'main'. The path must be relative to the repository "
            "root, and is case-sensitive. Do not retry the same path; find the file's real path first: "
            f"list_repository_tree with project_id '{P}', ref 'main' and folder_path 'src' lists the files "
            "there (`recursive: true` lists every path below it). A link to the file in GitLab's web UI "
            "has it too, and the url argument takes such a link."
        )
        assert fresh_standin.control.request_count() <= 2


async def test_url_on_another_host_makes_no_request_at_all(
    gateway: GatewayProcess,
    fresh_standin: Standin,  # noqa: F811
) -> None:
    port = fresh_standin.url.rsplit(":", 1)[1]
    async with mcp_client(gateway.mcp_url) as client:
        fresh_standin.control.clear_requests()
        for url in (
            f"https://evil.example.com/{P}/-/blob/main/README.md",
            f"http://localhost:{port}/{P}/-/blob/main/README.md",  # same server, another host name
            f"http://127.0.0.1:{int(port) + 1}/{P}/-/blob/main/README.md",
        ):
            is_error, out = await call(client, url=url)
            assert is_error and out["error"]["reason"] == "bad_request", out
        assert fresh_standin.control.request_count() == 0


async def test_seed_urls_with_slashes_in_the_branch(gateway: GatewayProcess) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        base = f"{gateway.env['GITLAB_URL']}/{P}/-/blob"
        is_error, out = await call(client, url=f"{base}/my-topic/with-slash/app/x.rb")
        assert not is_error, out
        assert (out["ref"], out["path"], out["content"]) == (
            "my-topic/with-slash",
            "app/x.rb",
            ds.x_rb("my-topic/with-slash"),
        )
        is_error, out = await call(client, url=f"{base}/feature/with-slash/app/x.rb")
        assert not is_error, out
        assert (out["ref"], out["path"]) == ("feature", ds.FEATURE_ONLY_FILE)
        is_error, out = await call(client, url=f"{base}/release/README.md?ref_type=tags")
        assert (is_error, out["content"]) == (False, ds.README_RELEASE_TAG)


async def test_excluded_files_are_refused(gateway: GatewayProcess) -> None:
    async with mcp_client(gateway.mcp_url) as client:
        is_error, out = await call(client, project_id=P, file_path=ds.FILES["secret"], ref="main")
        assert is_error
        assert out["error"]["message"] == (
            f"File '{ds.FILES['secret']}' is excluded from AI context by this project's settings and cannot "
            "be read."
        )
        assert "not-a-real-key" not in json.dumps(out)
