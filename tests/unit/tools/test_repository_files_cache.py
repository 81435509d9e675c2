"""``get_repository_file`` content cache: keyed by (credential, project, commit SHA, path); a full
SHA read twice costs one GitLab request; branches are resolved on every call; exclusion rules are
re-read once stale. Fixtures and helpers: ``test_repository_files.py``."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Callable

import pytest

from gateway.cache import CacheRegistry
from gateway.config import Settings
from gateway.gitlab.credentials import Credential
from tests.unit.gitlab.tool_env import ToolEnv
from tests.unit.tools.repository_files_fake import MAIN_SHA, PROJECT, PROJECT_ID, FakeRepoGitLab
from tests.unit.tools.test_repository_files import call, env, error, fake, ok

__all__ = ["env", "fake"]  # fixtures

TEXT = "".join(f"line {i}\n" for i in range(1, 101))


@pytest.fixture
def settings(make_settings: Callable[..., Settings], request: pytest.FixtureRequest) -> Settings:
    return make_settings(**getattr(request, "param", {}))


#: exclusions_ttl_seconds = 0: every cached read asks GitLab for the rules and access first.
RECHECK_EVERY_READ = pytest.mark.parametrize(
    "settings", [{"cache": {"exclusions_ttl_seconds": 0}}], indirect=True, ids=["exclusions_ttl_0"]
)


async def test_same_window_at_a_sha_twice_costs_one_request(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("f.txt", TEXT)
    first = ok(await call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA, offset=10, limit=5))
    second = ok(await call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA, offset=10, limit=5))
    other = ok(
        await call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA.upper(), offset=50, limit=5)
    )
    assert first == second
    assert other["content"] == "".join(f"line {i}\n" for i in range(51, 56))
    assert len(fake.requests) == 1


async def test_a_branch_is_resolved_on_every_call(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("f.txt", "old\n")
    assert ok(await call(env, project_id=PROJECT, file_path="f.txt", ref="main"))["content"] == "old\n"
    fake.add("f.txt", "new\n", at=MAIN_SHA)  # as if pushed (same SHA in this model, new content)
    assert ok(await call(env, project_id=PROJECT, file_path="f.txt", ref="main"))["content"] == "new\n"
    assert len(fake.requests) == 2


async def test_a_branch_read_fills_the_cache_under_its_commit_sha(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("f.txt", TEXT)
    first = ok(await call(env, project_id=PROJECT, file_path="f.txt", ref="main", limit=40))
    assert first["commit_sha"] == MAIN_SHA
    # Pinning the ref to commit_sha, as system_instruction suggests, reads from the cache, also by ID.
    rest = ok(await call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA, offset=40, limit=60))
    by_id = ok(await call(env, project_id=PROJECT_ID, file_path="f.txt", ref=MAIN_SHA, offset=99))
    assert first["content"] + rest["content"] == TEXT
    assert by_id["content"] == "line 100\n"
    assert len(fake.requests) == 1


async def test_callers_with_different_tokens_never_share_entries(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("f.txt", TEXT)
    args = {"project_id": PROJECT, "file_path": "f.txt", "ref": MAIN_SHA}
    ok(await env.call("get_repository_file", args))
    ok(
        await env.call(
            "get_repository_file", args, credential=Credential("PRIVATE-TOKEN", "glpat-someone-else")
        )
    )
    ok(
        await env.call(
            "get_repository_file", args, credential=Credential("PRIVATE-TOKEN", "glpat-someone-else")
        )
    )
    assert len(fake.requests) == 2


async def test_concurrent_identical_reads_share_one_request(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("f.txt", TEXT)
    results = await asyncio.gather(
        *(call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA, offset=n) for n in range(5))
    )
    assert [ok(r)["metadata"]["returned_lines"]["start"] for r in results] == [1, 2, 3, 4, 5]
    assert len(fake.requests) == 1


async def test_binary_results_are_cached_too_but_missing_files_are_not(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.add("logo.png", b"\x89PNG\0\0\0")
    for _ in range(2):
        assert (
            error(await call(env, project_id=PROJECT, file_path="logo.png", ref=MAIN_SHA))["kind"] == "binary"
        )
    assert len(fake.requests) == 1
    for _ in range(2):
        err = error(await call(env, project_id=PROJECT, file_path="nope.txt", ref=MAIN_SHA))
        assert err["kind"] == "file_not_found"
    assert len(fake.requests) == 3


@RECHECK_EVERY_READ
async def test_stale_exclusion_rules_are_read_again_before_cached_content(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.add(".env", "TOKEN=x\n")
    ok(await call(env, project_id=PROJECT, file_path=".env", ref=MAIN_SHA))
    ok(await call(env, project_id=PROJECT, file_path=".env", ref=MAIN_SHA))
    fake.exclusion_rules = [".env"]  # a maintainer excludes the file
    err = error(await call(env, project_id=PROJECT, file_path=".env", ref=MAIN_SHA))
    assert err["kind"] == "excluded"
    # By numeric ID: the same exclusions document, through projects(ids:).
    err = error(await call(env, project_id=PROJECT_ID, file_path=".env", ref=MAIN_SHA))
    assert err["kind"] == "excluded"
    assert fake.operations == [
        "GetRepositoryFile",
        "GetRepositoryFileExclusions",
        "GetRepositoryFileExclusions",
        "GetRepositoryFileExclusions",
    ]
    assert [fake.variables(i)["byId"] for i in (1, 3)] == [False, True]


async def test_with_the_cache_switched_off_every_read_is_one_request(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    env.services.caches = CacheRegistry(enabled=False, max_entries=64)
    fake.add("f.txt", TEXT)
    for _ in range(2):
        ok(await call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA))
    assert fake.operations == ["GetRepositoryFile", "GetRepositoryFile"]


async def test_a_read_leaves_no_garbage_cycle_holding_the_body(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    # httpx links a response and its stream both ways; the client breaks that cycle, so a large
    # answer is freed when the read ends, not at the next garbage collection.
    # A first read builds what the process keeps (validators, compiled documents): run alone, the
    # test counted that as freed garbage; traced, it took seconds. Frozen, the objects that exist
    # now (a pytest worker holds millions) are left out of the collections that follow, which
    # then look at what the read made alone.
    fake.add("big.txt", "x" * 2_000_000 + "\n")
    fake.add("first.txt", TEXT)
    ok(await call(env, project_id=PROJECT, file_path="first.txt", ref="main", limit=1))
    gc.disable()
    gc.freeze()
    tracemalloc.start()
    try:
        ok(await call(env, project_id=PROJECT, file_path="big.txt", ref="main", limit=1))
        held = tracemalloc.get_traced_memory()[0]
        gc.collect()
        freed_by_gc = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.unfreeze()
        gc.enable()
    assert freed_by_gc < 500_000


@RECHECK_EVERY_READ
@pytest.mark.gitlab_version("19.4.0", enterprise=False)
async def test_on_gitlab_ce_the_access_check_uses_the_ce_document(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    # CE has no exclusion rules: the access check is sent without them.
    fake.ce = True
    fake.add("f.txt", TEXT)
    ok(await call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA))
    ok(await call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA))
    assert fake.operations == ["GetRepositoryFile", "GetRepositoryFileExclusions"]
    assert all("duoContextExclusionSettings" not in r["query"] for r in fake.requests)
