"""``get_artifact_file``
(https://docs.gitlab.com/api/job_artifacts/#download-a-single-artifact-file-by-job-id): one file of
a job's artifacts archive, in byte windows, with a message of its own for each way it can fail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx

from tests.unit.gitlab.artifacts_tree import gitlab_tree
from tests.unit.gitlab.tool_env import ToolEnv, error, ok

GITLAB = "https://gitlab.example.com"
PROJECT = "grp/sub/proj"
JOB_URL = f"{GITLAB}/api/v4/projects/grp%2Fsub%2Fproj/jobs/5024"
FILE_URL = f"{JOB_URL}/artifacts/log/t%C3%A9st%20run.log"
TEXT = "".join(f"{i:03d} grüße 日本語 ✓\n" for i in range(50)).encode()
ARCHIVE = {"file_type": "archive", "size": 4096, "filename": "artifacts.zip", "file_format": "zip"}


def job(**overrides: Any) -> dict[str, Any]:
    return {
        "id": 5024,
        "name": "rspec 21/30",
        "status": "failed",
        "web_url": f"{GITLAB}/{PROJECT}/-/jobs/5024",
        "artifacts": [ARCHIVE],
        "artifacts_expire_at": "2099-01-01T00:00:00.000Z",
        **overrides,
    }


def args(**extra: Any) -> dict[str, Any]:
    return {"project_id": PROJECT, "job_id": 5024, "artifact_path": "log/tést run.log", **extra}


async def test_windows_of_a_text_file_join_into_it_without_splitting_a_character(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(FILE_URL).mock(return_value=httpx.Response(200, content=TEXT))
    pieces, offset = [], 0
    while True:
        out = ok(
            await env.call("get_artifact_file", args(byte_offset=offset, byte_limit=101)), "get_artifact_file"
        )
        meta = out["metadata"]
        assert meta["returned"]["start"] == offset and meta["total_bytes"] == len(TEXT)
        pieces.append(out["content"])
        if out.get("next") is None:
            assert not meta["truncated"]
            break
        assert meta["truncated"] and out["next"]["byte_offset"] == meta["returned"]["end"]
        assert f'Call again with {{"byte_offset": {meta["returned"]["end"]}}}' in out["system_instruction"]
        offset = meta["returned"]["end"]
    assert "".join(pieces) == TEXT.decode()
    assert out["path"] == "log/tést run.log" and out["job_id"] == 5024


async def test_a_file_url_names_the_job_and_the_file(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(FILE_URL).mock(return_value=httpx.Response(200, content=TEXT))
    url = f"{GITLAB}/{PROJECT}/-/jobs/5024/artifacts/file/log/t%C3%A9st%20run.log"
    out = ok(await env.call("get_artifact_file", {"url": url, "byte_limit": 20}), "get_artifact_file")
    assert (
        out["path"] == "log/tést run.log" and out["content"] == "000 grüße 日本"
    )  # 18 of 20 bytes: 語 would be cut
    err = error(await env.call("get_artifact_file", {"url": url, "artifact_path": "other.txt"}))
    assert "the url names 'log/tést run.log'" in err["message"]


async def test_binary_files_are_refused_with_their_type_and_a_link(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
    router.get(f"{JOB_URL}/artifacts/shots/a.png").mock(
        return_value=httpx.Response(200, content=png, headers={"Content-Length": str(len(png))})
    )
    err = error(await env.call("get_artifact_file", args(artifact_path="shots/a.png")))
    assert err["reason"] == "bad_request" and err["kind"] == "binary" and err["size_bytes"] == len(png)
    assert "binary (image/png)" in err["message"]
    assert f"{GITLAB}/{PROJECT}/-/jobs/5024/artifacts/raw/shots/a.png" in err["message"]


async def test_a_missing_file_a_job_without_archive_and_expired_artifacts_differ(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    job_route = router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(FILE_URL).mock(return_value=httpx.Response(404, json={"message": "404 Not Found"}))
    router.get(url__startswith=f"{JOB_URL}/artifacts/tree").mock(
        side_effect=gitlab_tree({"log/test run.log": 9})
    )
    err = error(await env.call("get_artifact_file", args()))
    assert (
        err["kind"] == "file_not_found" and "not found in the artifacts archive of job 5024" in err["message"]
    )
    assert err["nearest_paths"] == ["log/test run.log"]
    job_route.mock(return_value=httpx.Response(200, json=job(artifacts=[], artifacts_expire_at=None)))
    err = error(await env.call("get_artifact_file", args()))
    assert err["kind"] == "no_artifacts" and "has no artifacts archive" in err["message"]
    job_route.mock(
        return_value=httpx.Response(200, json=job(artifacts=[], artifacts_expire_at="2026-01-01T00:00:00Z"))
    )
    err = error(await env.call("get_artifact_file", args()))
    assert err["kind"] == "artifacts_expired" and "expired on 2026-01-01" in err["message"]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("../../etc/passwd", "path_traversal"),
        ("reports/../../secret", "path_traversal"),
        ("./a.txt", "path_traversal"),
        ("/etc/passwd", "absolute_path"),
        ("C:/Windows/win.ini", "absolute_path"),
        ("reports\\..\\x", "backslash"),
        ("%2e%2e/secret", "encoded_path"),
        ("reports%2Fx", "encoded_path"),
        ("reports/", "directory"),
        ("a//b", "directory"),
        ("a\x00b", "control_characters"),
        ("  ", "empty_path"),
    ],
)
async def test_paths_that_leave_the_archive_are_refused_before_any_request(
    env: ToolEnv, router: respx.MockRouter, path: str, kind: str
) -> None:
    err = error(await env.call("get_artifact_file", args(artifact_path=path)))
    assert (
        err["reason"] == "bad_request"
        and err["kind"] == kind
        and err["invalid_arguments"] == ["artifact_path"]
    )
    assert not router.calls


async def test_a_url_with_an_encoded_traversal_is_refused(env: ToolEnv, router: respx.MockRouter) -> None:
    url = f"{GITLAB}/{PROJECT}/-/jobs/5024/artifacts/file/%2e%2e/secret"
    err = error(await env.call("get_artifact_file", {"url": url}))
    assert err["kind"] == "path_traversal"
    assert not router.calls


async def test_a_window_stops_reading_once_full(env: ToolEnv, router: respx.MockRouter) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(10_000):
            sent += 1000
            yield b"x" * 999 + b"\n"

    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(FILE_URL).mock(side_effect=lambda request: httpx.Response(200, content=chunks()))
    out = ok(await env.call("get_artifact_file", args(byte_limit=5000)), "get_artifact_file")
    assert out["metadata"]["returned"] == {"start": 0, "end": 5000} and out["metadata"]["total_bytes"] is None
    assert sent < 20_000


async def test_tail_bytes_reads_the_end_of_a_file_whose_size_is_unknown(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))

    def whole(request: httpx.Request) -> httpx.Response:
        # As Workhorse serves an extracted entry: Range ignored, streamed, no Content-Length.
        assert request.headers["Range"] == "bytes=-100"
        return httpx.Response(200, stream=httpx.ByteStream(TEXT))

    router.get(FILE_URL).mock(side_effect=whole)
    out = ok(await env.call("get_artifact_file", args(tail_bytes=100)), "get_artifact_file")
    meta = out["metadata"]
    assert meta["total_bytes"] == len(TEXT) and meta["returned"]["end"] == len(TEXT)
    assert TEXT.endswith(out["content"].encode()) and len(out["content"].encode()) > 96  # whole characters
    assert out["content"].endswith("049 grüße 日本語 ✓\n")
    start = meta["returned"]["start"]
    assert f'{{"byte_offset": {start - 100}, "byte_limit": 100}}' in out["system_instruction"]


async def test_tail_bytes_takes_gitlabs_range_when_it_honours_it(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    size = len(TEXT)
    router.get(FILE_URL).mock(
        return_value=httpx.Response(
            206, content=TEXT[-64:], headers={"Content-Range": f"bytes {size - 64}-{size - 1}/{size}"}
        )
    )
    out = ok(await env.call("get_artifact_file", args(tail_bytes=64)), "get_artifact_file")
    assert out["metadata"]["total_bytes"] == size and TEXT.endswith(out["content"].encode())
    # A file shorter than the tail is returned whole.
    router.get(FILE_URL).mock(return_value=httpx.Response(200, content=b"short\n"))
    out = ok(await env.call("get_artifact_file", args(tail_bytes=64)), "get_artifact_file")
    assert out["content"] == "short\n" and out["metadata"]["returned"] == {"start": 0, "end": 6}
    assert "system_instruction" not in out
    err = error(await env.call("get_artifact_file", args(tail_bytes=64, byte_offset=10)))
    assert err["reason"] == "bad_request" and "tail_bytes reads the end" in err["message"]
