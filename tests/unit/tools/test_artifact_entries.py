"""The paths inside a job's artifacts archive (``get_job`` with ``include: ["artifacts"]``), and the
nearest ones when ``get_artifact_file`` is given a missing path: from GitLab's artifacts tree
(https://docs.gitlab.com/api/job_artifacts/#list-all-files-in-the-artifacts-archive) where GitLab
has it, else from the archive's zip directory read with HTTP Range, never the whole archive.
"""

from __future__ import annotations

import io
import itertools
import re
import zipfile
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import respx

from gateway.config import Settings
from gateway.gitlab.zip_directory import TAIL_BYTES
from gateway.tools.ci import artifact_directory, artifact_entries, artifact_tree
from gateway.tools.ci.artifact_directory import MAX_DIRECTORY_BYTES
from tests.unit.gitlab.artifacts_tree import gitlab_tree
from tests.unit.gitlab.tool_env import ToolEnv, error, ok

GITLAB = "https://gitlab.example.com"
PROJECT = "grp/sub/proj"
JOB_URL = f"{GITLAB}/api/v4/projects/grp%2Fsub%2Fproj/jobs/5024"
TREE_URL = f"{JOB_URL}/artifacts/tree"
ARCHIVE_URL = f"{JOB_URL}/artifacts"
FILES = {
    "logs/integration.log": b"integration: 3 failed\n" * 50,
    "screenshots/failure.png": b"\x89PNG\r\n\x1a\n" + bytes(300),
    "reports/summary.txt": b"summary\n",
}


def make_zip(files: dict[str, bytes], *, directories: bool = True, comment: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            if directories and "/" in path:
                folder = path.rsplit("/", 1)[0] + "/"
                if folder not in zf.namelist():
                    zf.writestr(folder, b"")
            zf.writestr(path, data)
        zf.comment = comment
    return buf.getvalue()


def job(size: int = 4096) -> dict[str, Any]:
    return {
        "id": 5024,
        "name": "integration",
        "status": "failed",
        "web_url": f"{GITLAB}/{PROJECT}/-/jobs/5024",
        "artifacts": [
            {"file_type": "archive", "size": size, "filename": "artifacts.zip", "file_format": "zip"}
        ],
        "artifacts_expire_at": "2099-01-01T00:00:00.000Z",
    }


class Archive:
    """The archive download: honours Range (or not), records each Range asked and bytes served."""

    def __init__(self, data: bytes, *, honour: bool = True) -> None:
        self.data = data
        self.honour = honour
        self.ranges: list[str | None] = []
        self.served = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        spec = request.headers.get("Range")
        self.ranges.append(spec)
        assert request.headers.get("Accept-Encoding") == "identity"
        size = len(self.data)
        if not self.honour or spec is None:
            self.served += size
            return httpx.Response(200, content=self.data, headers={"Content-Length": str(size)})
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", spec)
        assert m is not None, spec
        if m[1] == "":
            start, end = max(0, size - int(m[2])), size - 1
        else:
            start, end = int(m[1]), min(size - 1, int(m[2]))
        body = self.data[start : end + 1]
        self.served += len(body)
        return httpx.Response(206, content=body, headers={"Content-Range": f"bytes {start}-{end}/{size}"})


def listing(**extra: Any) -> dict[str, Any]:
    return {"id": PROJECT, "job_id": 5024, "include": ["artifacts"], **extra}


def old_gitlab(router: respx.MockRouter) -> respx.Route:
    """GitLab before 18.8: the tree path is the single-file route, and no file `tree` is there."""
    return router.get(url__startswith=TREE_URL).mock(return_value=httpx.Response(404, text="404 Not Found\n"))


@pytest.mark.parametrize("deep", [False, True], ids=["one_level", "documented_deep"])
async def test_the_tree_lists_paths_sizes_and_types_in_pages(
    env: ToolEnv, router: respx.MockRouter, deep: bool
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    paths = [f"logs/part-{i:03d}.log" for i in range(130)]
    route = router.get(url__startswith=TREE_URL).mock(
        side_effect=gitlab_tree({p: 100 + i for i, p in enumerate(paths)}, deep=deep)
    )
    archive = router.get(ARCHIVE_URL)
    out = ok(await env.call("get_job", listing(first=2)), "get_job")
    files = out["artifact_files"]
    assert files["source"] == "tree"
    assert files["entries"] == [
        {"path": "logs/", "type": "directory", "size": None},
        {"path": "logs/part-000.log", "type": "file", "size": 100},
    ]
    assert out["artifacts"][0]["name"] == "artifacts.zip"  # the archives stay listed as before
    seen = [e["path"] for e in files["entries"]]
    after = files["page_info"]["end_cursor"]
    while files["page_info"]["has_next_page"]:
        files = ok(await env.call("get_job", listing(first=40, after=after)), "get_job")["artifact_files"]
        seen += [e["path"] for e in files["entries"]]
        after = files["page_info"]["end_cursor"]
    assert seen == ["logs/", *paths]  # every entry once, in order, across GitLab's pages of 100
    assert not archive.called and route.call_count >= 2
    assert all(call.request.url.params["per_page"] == "100" for call in route.calls)


@pytest.mark.parametrize("deep", [False, True], ids=["one_level", "documented_deep"])
async def test_a_walk_cut_at_its_request_bound_goes_on_with_the_cursor(
    env: ToolEnv, router: respx.MockRouter, deep: bool
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    # More folders than one call reads pages, nested, with one folder of more than a page.
    files = {f"coverage/m{i:02d}/index.html": 7 for i in range(25)}
    files |= {f"coverage/m03/deep/er/f{i:03d}.txt": i for i in range(120)} | {"z.txt": 1, "a-b/c.txt": 2}
    expected = sorted(
        set(files) | {p.rsplit("/", n)[0] + "/" for p in files for n in range(1, p.count("/") + 1)}
    )
    route = router.get(url__startswith=TREE_URL).mock(side_effect=gitlab_tree(files, deep=deep))
    files_out = ok(await env.call("get_job", listing(first=100)), "get_job")["artifact_files"]
    seen, calls, counts = [e["path"] for e in files_out["entries"]], [route.call_count], []
    assert files_out["page_info"]["has_next_page"] and files_out["total"] is None
    while files_out["page_info"]["has_next_page"]:
        counts.append(len(files_out["entries"]))
        after = files_out["page_info"]["end_cursor"]
        files_out = ok(await env.call("get_job", listing(first=100, after=after)), "get_job")[
            "artifact_files"
        ]
        seen += [e["path"] for e in files_out["entries"]]
        calls.append(route.call_count)
    assert seen == expected  # sorted by path, every folder, each entry once
    assert all(b - a <= artifact_tree.MAX_TREE_PAGES for a, b in itertools.pairwise([0, *calls]))
    assert any(n < 100 for n in counts)  # some pages were cut by the request bound, not by `first`
    # A cursor of the walk deep in one folder is refused for another filter.
    first = ok(await env.call("get_job", listing(first=30)), "get_job")["artifact_files"]
    err = error(
        await env.call("get_job", listing(after=first["page_info"]["end_cursor"], artifact_filter="z/"))
    )
    assert err["reason"] == "bad_request" and "the same `artifact_filter`" in err["message"]


async def test_a_glob_or_a_prefix_filters_the_paths(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    route = router.get(url__startswith=TREE_URL).mock(side_effect=gitlab_tree(FILES))
    files = ok(await env.call("get_job", listing(artifact_filter="*.log")), "get_job")["artifact_files"]
    assert [e["path"] for e in files["entries"]] == ["logs/integration.log"] and files["total"] == 1
    files = ok(await env.call("get_job", listing(artifact_filter="reports/")), "get_job")["artifact_files"]
    assert [e["path"] for e in files["entries"]] == ["reports/summary.txt"]
    # A directory prefix narrows GitLab's tree: the walk starts there.
    assert route.calls.last.request.url.params["path"] == "reports/"
    before = route.call_count
    files = ok(await env.call("get_job", listing(artifact_filter="logs/int")), "get_job")["artifact_files"]
    assert [e["path"] for e in files["entries"]] == ["logs/integration.log"]
    # A prefix is walked only on its way: the root, then logs/ (never reports/ nor screenshots/).
    assert [c.request.url.params.get("path") for c in route.calls[before:]] == [None, "logs/"]
    err = error(await env.call("get_job", {"id": PROJECT, "job_id": 5024, "artifact_filter": "*.log"}))
    assert 'add include: ["artifacts"]' in err["message"]
    err = error(await env.call("get_job", listing(after="bm90LWEtY3Vyc29y")))
    assert err["reason"] == "bad_request" and "`after` is not a cursor" in err["message"]


async def test_an_older_gitlab_is_listed_from_the_zip_directory_with_one_ranged_read(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    tree = old_gitlab(router)
    archive = Archive(make_zip(FILES))
    router.get(ARCHIVE_URL).mock(side_effect=archive)
    out = ok(await env.call("get_job", listing()), "get_job")
    files = out["artifact_files"]
    assert files["source"] == "archive_directory" and files["total"] == 6
    assert {e["path"]: (e["type"], e["size"]) for e in files["entries"]} == {
        "logs/": ("directory", None),
        "logs/integration.log": ("file", len(FILES["logs/integration.log"])),
        "screenshots/": ("directory", None),
        "screenshots/failure.png": ("file", len(FILES["screenshots/failure.png"])),
        "reports/": ("directory", None),
        "reports/summary.txt": ("file", len(FILES["reports/summary.txt"])),
    }
    assert archive.ranges == [f"bytes=-{TAIL_BYTES}"]  # a small archive's directory is in its tail
    # The missing tree is learnt once for this GitLab: the next listing goes straight to the archive.
    ok(await env.call("get_job", listing()), "get_job")
    assert tree.call_count == 1 and len(archive.ranges) == 2


async def test_a_large_directory_is_read_with_a_second_range_and_paged(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    old_gitlab(router)
    many = {f"coverage/src/module_{i:05d}/index.html": b"<html/>" for i in range(1200)}
    data = make_zip(many, directories=False)
    archive = Archive(data)
    router.get(ARCHIVE_URL).mock(side_effect=archive)
    files = ok(await env.call("get_job", listing(first=100, artifact_filter="*_00299/*")), "get_job")[
        "artifact_files"
    ]
    # The zip has no folder entries; the listing has them, as GitLab's tree would.
    assert [e["path"] for e in files["entries"]] == [
        "coverage/src/module_00299/",
        "coverage/src/module_00299/index.html",
    ]
    assert files["total"] == 2 and not files["page_info"]["has_next_page"]
    directory = zipfile.ZipFile(io.BytesIO(data)).start_dir
    # The tail, then exactly the directory: from its first header to the end record.
    end = data.rindex(b"PK\x05\x06") - 1
    assert archive.ranges == [f"bytes=-{TAIL_BYTES}", f"bytes={directory}-{end}"]
    assert archive.served < TAIL_BYTES + (len(data) - directory)
    seen: list[str] = []
    after = None
    while True:
        more: dict[str, Any] = {"after": after} if after else {}
        files = ok(await env.call("get_job", listing(first=100, **more)), "get_job")["artifact_files"]
        seen += [e["path"] for e in files["entries"]]
        if not files["page_info"]["has_next_page"]:
            break
        after = files["page_info"]["end_cursor"]
    folders = ["coverage/", "coverage/src/"] + [f"coverage/src/module_{i:05d}/" for i in range(1200)]
    assert seen == sorted([*many, *folders]) and files["total"] == 2402


async def test_zip64_archives_are_listed(
    env: ToolEnv, router: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # zipfile writes zip64 records past these limits; lowered, a small archive has them all.
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 100)
    data = make_zip(FILES, directories=False)
    assert b"PK\x06\x06" in data and b"PK\x06\x07" in data
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    old_gitlab(router)
    router.get(ARCHIVE_URL).mock(side_effect=Archive(data))
    files = ok(await env.call("get_job", listing()), "get_job")["artifact_files"]
    sizes = {e["path"]: e["size"] for e in files["entries"] if e["type"] == "file"}
    assert sizes == {p: len(d) for p, d in FILES.items()}


async def test_an_archive_without_metadata_uses_the_directory_for_that_job_only(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(url__startswith=TREE_URL).mock(
        return_value=httpx.Response(404, json={"message": "404 Artifacts metadata Not Found"})
    )
    router.get(ARCHIVE_URL).mock(side_effect=Archive(make_zip(FILES)))
    files = ok(await env.call("get_job", listing()), "get_job")["artifact_files"]
    assert files["source"] == "archive_directory" and len(files["entries"]) == 6
    assert env.services.capabilities.artifacts_tree is not False  # GitLab has the tree: kept for others


async def test_when_gitlab_ignores_range_a_large_archive_is_not_downloaded(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job(size=50 * 1024 * 1024)))
    old_gitlab(router)
    sent: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(50):
            sent.append(1)
            yield b"\0" * (1024 * 1024)

    size = 50 * 1024 * 1024
    router.get(ARCHIVE_URL).mock(
        return_value=httpx.Response(200, stream=body(), headers={"Content-Length": str(size)})  # type: ignore[arg-type]
    )
    out = ok(await env.call("get_job", listing()), "get_job")
    files = out["artifact_files"]
    assert files["entries"] == [] and not files["page_info"]["has_next_page"]
    assert "ignored the HTTP Range request" in files["unavailable"]
    assert f"{size} bytes" in files["unavailable"] and str(MAX_DIRECTORY_BYTES) in files["unavailable"]
    assert len(sent) <= 1  # the Content-Length said enough: the body was not read


async def test_a_whole_archive_of_unknown_length_is_read_no_further_than_the_bound(
    env: ToolEnv, router: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artifact_directory, "MAX_DIRECTORY_BYTES", 1024 * 1024)
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    old_gitlab(router)
    sent: list[int] = []

    async def body() -> AsyncIterator[bytes]:  # chunked: no Content-Length to go by
        for _ in range(100):
            sent.append(1)
            yield b"\0" * (64 * 1024)

    router.get(ARCHIVE_URL).mock(return_value=httpx.Response(200, stream=body()))  # type: ignore[arg-type]
    files = ok(await env.call("get_job", listing()), "get_job")["artifact_files"]
    assert "sent the whole archive (over 1048576 bytes)" in files["unavailable"]
    assert len(sent) <= 17  # 1 MiB in 64 KiB chunks, and the one that crossed the bound


async def test_when_gitlab_ignores_range_a_small_archive_is_read_whole(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    old_gitlab(router)
    archive = Archive(make_zip(FILES), honour=False)
    router.get(ARCHIVE_URL).mock(side_effect=archive)
    files = ok(await env.call("get_job", listing(artifact_filter="logs/")), "get_job")["artifact_files"]
    assert [e["path"] for e in files["entries"]] == ["logs/integration.log"]
    assert len(archive.ranges) == 1


async def test_a_redirect_to_object_storage_is_not_followed_and_says_so(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    old_gitlab(router)
    router.get(ARCHIVE_URL).mock(
        return_value=httpx.Response(
            302, headers={"Location": "https://storage.example.com/a.zip?X-Amz-Signature=s"}
        )
    )
    out = ok(await env.call("get_job", listing()), "get_job")
    assert "redirect (302) to its object storage" in out["artifact_files"]["unavailable"]
    assert "X-Amz-Signature" not in str(out)


async def test_a_missing_path_names_the_nearest_ones(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(f"{JOB_URL}/artifacts/integration.log").mock(
        return_value=httpx.Response(404, json={"message": "404 Not Found"})
    )
    router.get(url__startswith=TREE_URL).mock(side_effect=gitlab_tree(FILES))
    args = {"project_id": PROJECT, "job_id": 5024, "artifact_path": "integration.log"}
    err = error(await env.call("get_artifact_file", args))
    assert err["kind"] == "file_not_found" and err["nearest_paths"][0] == "logs/integration.log"
    assert "Nearest paths in the archive: `logs/integration.log`" in err["message"]
    assert "/artifacts/browse" not in err["message"]


async def test_artifacts_the_token_may_not_read_leave_the_job_readable(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(url__startswith=TREE_URL).mock(
        return_value=httpx.Response(403, json={"message": "403 Forbidden"})
    )
    out = ok(await env.call("get_job", listing()), "get_job")
    assert out["name"] == "integration" and out["artifact_files"]["entries"] == []
    assert "refused to list the artifacts of job 5024 (403)" in out["artifact_files"]["unavailable"]
    err = error(await env.call("get_job", listing(artifact_filter="*" * 1025)))
    assert err["reason"] == "bad_request" and "at most 1024" in err["message"]


async def test_an_empty_archive_is_said_so(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job(size=0)))
    old_gitlab(router)
    router.get(ARCHIVE_URL).mock(return_value=httpx.Response(416, headers={"Content-Range": "bytes */0"}))
    files = ok(await env.call("get_job", listing()), "get_job")["artifact_files"]
    assert files["entries"] == [] and "archive is empty" in files["unavailable"]


async def test_an_archive_gitlab_no_longer_has_leaves_the_job_and_says_why(
    env: ToolEnv, router: respx.MockRouter
) -> None:
    # Erased (or expired before GitLab marked it): an older GitLab's archive download answers 404.
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    old_gitlab(router)
    router.get(ARCHIVE_URL).mock(return_value=httpx.Response(404, json={"message": "404 Not Found"}))
    out = ok(await env.call("get_job", listing()), "get_job")
    assert out["name"] == "integration" and out["status"] == "failed"  # the job's own data is kept
    files = out["artifact_files"]
    assert files["entries"] == [] and files["source"] == "archive_directory"
    assert "no artifacts archive for job 5024" in files["unavailable"]
    assert "erased" in files["unavailable"]


async def test_expired_artifacts_on_the_tree_are_said_expired(env: ToolEnv, router: respx.MockRouter) -> None:
    router.get(JOB_URL).mock(
        return_value=httpx.Response(200, json=job() | {"artifacts_expire_at": "2020-01-01"})
    )
    router.get(url__startswith=TREE_URL).mock(
        return_value=httpx.Response(404, json={"message": "404 Artifacts Not Found"})
    )
    out = ok(await env.call("get_job", listing()), "get_job")
    assert out["id"] == 5024 and out["artifacts"][0]["expired"] is True
    assert "expired on 2020-01-01" in out["artifact_files"]["unavailable"]


@pytest.mark.parametrize("deep", [False, True], ids=["one_level", "documented_deep"])
@pytest.mark.parametrize("artifact_filter", [None, "logs/", "re", "*.log", "*/", "missing/", "reports/sub/"])
async def test_both_ways_of_listing_answer_a_filter_alike(
    make_settings: Callable[..., Settings], artifact_filter: str | None, deep: bool
) -> None:
    # The archive as a runner may write it: its own order, no folder entries.
    files = {
        "zeta/b.txt": b"b",
        "logs/integration.log": b"x" * 9,
        "a.txt": b"a",
        "reports/sub/r.xml": b"<r/>",
        "reports/sub/deeper/d.txt": b"d",
        "reports-old/x.txt": b"x",
    }
    seen: list[list[dict[str, Any]]] = []
    for has_tree in (True, False):
        with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
            router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
            if has_tree:
                router.get(url__startswith=TREE_URL).mock(side_effect=gitlab_tree(files, deep=deep))
            else:
                old_gitlab(router)
                router.get(ARCHIVE_URL).mock(side_effect=Archive(make_zip(files, directories=False)))
            async with httpx.AsyncClient() as http:
                env = ToolEnv(make_settings(), http)
                more = {"artifact_filter": artifact_filter} if artifact_filter else {}
                out = ok(await env.call("get_job", listing(**more)), "get_job")["artifact_files"]
                assert out["source"] == ("tree" if has_tree else "archive_directory")
                seen.append(out["entries"])
    assert seen[0] == seen[1]
    if artifact_filter == "logs/":
        assert [e["path"] for e in seen[0]] == ["logs/integration.log"]
    if artifact_filter is None:
        assert [e["path"] for e in seen[0]][:3] == ["a.txt", "logs/", "logs/integration.log"]


async def test_distinct_filters_stay_in_a_bounded_cache_and_not_in_fnmatchs() -> None:
    import fnmatch

    fnmatch._compile_pattern.cache_clear()  # type: ignore[attr-defined]
    for n in range(artifact_entries.GLOB_CACHE_SIZE * 3):
        test = artifact_entries.matcher(f"reports/{n}/*.xml")
        assert test(f"reports/{n}/junit.xml") and not test("reports/other/junit.xml")
    assert len(artifact_entries._globs) == artifact_entries.GLOB_CACHE_SIZE
    assert fnmatch._compile_pattern.cache_info().currsize == 0  # type: ignore[attr-defined]


def test_the_nearest_paths_among_crafted_names_cost_a_bounded_number_of_comparisons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import difflib

    compared: list[int] = []
    real_ratio = difflib.SequenceMatcher.ratio

    def counted(self: difflib.SequenceMatcher[str]) -> float:
        compared.append(max(len(getattr(self, "a")), len(getattr(self, "b"))))  # noqa: B009 (untyped)
        return real_ratio(self)

    monkeypatch.setattr(difflib.SequenceMatcher, "ratio", counted)
    # Long names alike enough that every one passes difflib's quick filters (the attack's shape).
    paths = [f"build/{'ab' * 500}{n}/out.bin" for n in range(2_000)] + ["logs/integration.log"]
    found = artifact_entries.closest("build/" + "ab" * 600, paths)
    assert found and all(p.startswith("build/abab") for p in found)
    assert len(compared) <= artifact_entries.RATIO_CANDIDATES
    assert max(compared) <= artifact_entries.MAX_COMPARED_CHARS
    assert artifact_entries.closest("logs/integraton.log", paths) == ["logs/integration.log"]


async def test_the_nearest_paths_are_compared_off_the_event_loop(
    env: ToolEnv, router: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    threads: list[threading.Thread] = []
    real = artifact_entries.closest

    def recording(path: str, paths: list[str], *, cutoff: float = 0.5) -> list[str]:
        threads.append(threading.current_thread())
        return real(path, paths, cutoff=cutoff)

    monkeypatch.setattr(artifact_entries, "closest", recording)
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    router.get(f"{JOB_URL}/artifacts/integration.log").mock(
        return_value=httpx.Response(404, json={"message": "404 Not Found"})
    )
    router.get(url__startswith=TREE_URL).mock(side_effect=gitlab_tree(FILES))
    args = {"project_id": PROJECT, "job_id": 5024, "artifact_path": "integration.log"}
    assert error(await env.call("get_artifact_file", args))["kind"] == "file_not_found"
    assert threads and threads[0] is not threading.main_thread()


async def test_a_tree_page_past_its_bound_is_an_upstream_error_naming_it(
    env: ToolEnv, router: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hostile GitLab or proxy ignoring per_page: the page is cut at its bound, never decoded.
    monkeypatch.setattr(artifact_tree, "MAX_TREE_PAGE_BYTES", 64 * 1024)
    router.get(JOB_URL).mock(return_value=httpx.Response(200, json=job()))
    flood = b"[" + b"{}," * 40_000 + b"{}]"
    router.get(url__startswith=TREE_URL).mock(return_value=httpx.Response(200, content=flood))
    err = error(await env.call("get_job", listing()))
    assert err["reason"] == "upstream_error"
    assert "larger than 0.0625 MiB" in err["message"] and "reads no more than that" in err["message"]
