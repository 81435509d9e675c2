"""``get_repository_file`` with ``url``: only the configured GitLab, refs with slashes resolved like
GitLab's web UI (the two cases GitLab's tool documents), ``?ref_type=``, line anchors, and agreement with
``project_id``/``file_path``/``ref``. Fixtures and helpers: ``test_repository_files.py``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.gitlab.tool_env import ToolEnv
from tests.unit.tools.repository_files_fake import (
    FEATURE_SHA,
    GITLAB,
    MAIN_SHA,
    PROJECT,
    PROJECT_ID,
    RELEASE_SHA,
    SLASH_SHA,
    TAG_SHA,
    TOPIC_SHA,
    FakeRepoGitLab,
)
from tests.unit.tools.test_repository_files import call, env, error, fake, ok, settings

__all__ = ["env", "fake", "settings"]  # fixtures

BLOB = f"{GITLAB}/{PROJECT}/-/blob"


# -- refs with slashes ---------------------------------------------------------------------


async def test_seed_branch_with_slashes_resolves_to_that_branch(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("app/x.rb", "topic\n", at=TOPIC_SHA)
    out = ok(await call(env, url=f"{BLOB}/my-topic/with-slash/app/x.rb"))
    assert (out["ref"], out["path"], out["commit_sha"]) == ("my-topic/with-slash", "app/x.rb", TOPIC_SHA)
    assert out["content"] == "topic\n"
    # Ref names only because the URL was ambiguous, narrowed to the first segment.
    assert fake.operations == ["GetRepositoryFileBranchNames", "REST tags", "GetRepositoryFile"]
    assert fake.variables(0) == {
        "fullPath": PROJECT,
        "searchPattern": "my-topic*",
        "offset": 0,
        "limit": 1000,
    }
    tags = fake.requests[1]
    assert tags["path"] == "/api/v4/projects/grp%2Fsub%2Fproj/repository/tags"
    assert tags["params"] == {"search": "^my-topic", "per_page": "100", "page": "1"}


async def test_seed_first_segment_that_is_a_branch_wins(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    # Both `feature` and `feature/with-slash` exist and the repository has no tags: GitLab's web UI
    # (use_first_path_segment?) takes `feature`.
    fake.tags.clear()
    fake.add("with-slash/app/x.rb", "on feature\n", at=FEATURE_SHA)
    fake.add("app/x.rb", "on feature/with-slash\n", at=SLASH_SHA)
    out = ok(await call(env, url=f"{BLOB}/feature/with-slash/app/x.rb"))
    assert (out["ref"], out["path"], out["commit_sha"]) == ("feature", "with-slash/app/x.rb", FEATURE_SHA)
    assert out["content"] == "on feature\n"


async def test_with_branches_and_tags_the_longest_ref_wins_over_the_first_segment(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    # `feature` and `feature/with-slash` beside tags: the refs are ambiguous (GitLab's
    # has_ambiguous_refs?), so GitLab takes the longest ref that prefixes the path.
    fake.add("with-slash/README.md", "on feature\n", at=FEATURE_SHA)
    fake.add("README.md", "on feature/with-slash\n", at=SLASH_SHA)
    out = ok(await call(env, url=f"{BLOB}/feature/with-slash/README.md"))
    assert (out["ref"], out["path"], out["commit_sha"]) == ("feature/with-slash", "README.md", SLASH_SHA)
    assert out["content"] == "on feature/with-slash\n"
    # No tag starts with `feature`: one tag name tells whether the repository has tags.
    assert fake.operations == ["GetRepositoryFileBranchNames", "REST tags", "REST tags", "GetRepositoryFile"]
    assert fake.requests[2]["params"] == {"per_page": "1"}


async def test_without_tags_the_first_segment_costs_one_more_request(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.tags.clear()
    fake.add("with-slash/README.md", "on feature\n", at=FEATURE_SHA)
    for _ in range(2):
        assert ok(await call(env, url=f"{BLOB}/feature/with-slash/README.md"))["ref"] == "feature"
    # The tag-existence answer is cached with the names.
    assert fake.operations == [
        "GetRepositoryFileBranchNames",
        "REST tags",
        "REST tags",
        "GetRepositoryFile",
        "GetRepositoryFile",
    ]


async def test_a_url_read_that_fails_says_which_refs_were_tried(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    # The file exists on neither split: the error names the ref read and the other candidates,
    # and does not ask for the link the agent gave.
    err = error(await call(env, url=f"{BLOB}/feature/with-slash/README.md"))
    assert err["message"].startswith("File 'README.md' does not exist at ref 'feature/with-slash'.")
    assert "Ref tried: 'feature/with-slash'" in err["message"]
    assert "'feature'" in err["message"] and "pass it as ref together with the same url" in err["message"]
    assert "url argument takes" not in err["message"] and "link to the file" not in err["message"]
    fake.add("with-slash/README.md", "on feature\n", at=FEATURE_SHA)
    out = ok(await call(env, url=f"{BLOB}/feature/with-slash/README.md", ref="feature"))
    assert (out["ref"], out["content"]) == ("feature", "on feature\n")


async def test_longest_tag_that_prefixes_the_path(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("notes/q1.md", "release notes\n", at=RELEASE_SHA)
    out = ok(await call(env, url=f"{BLOB}/release/2026/q1/notes/q1.md"))
    assert (out["ref"], out["path"]) == ("release/2026/q1", "notes/q1.md")


async def test_no_matching_ref_falls_back_to_the_first_segment(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    err = error(await call(env, url=f"{BLOB}/nope/dir/file.txt"))
    assert err["message"].startswith("Ref 'nope' not found.")
    assert "Ref tried: 'nope'" in err["message"]


async def test_ref_names_are_cached_per_project_and_credential(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("app/x.rb", "topic\n", at=TOPIC_SHA)
    for _ in range(2):
        ok(await call(env, url=f"{BLOB}/my-topic/with-slash/app/x.rb"))
    assert fake.operations == [
        "GetRepositoryFileBranchNames",
        "REST tags",
        "GetRepositoryFile",
        "GetRepositoryFile",
    ]


@pytest.mark.parametrize(
    "url",
    [f"{BLOB}/main/README.md", f"{BLOB}/{MAIN_SHA}/docs/deep/README.md", f"{BLOB}/HEAD/docs/deep/README.md"],
)
async def test_unambiguous_urls_fetch_no_ref_names(env: ToolEnv, fake: FakeRepoGitLab, url: str) -> None:
    fake.add("README.md", "hi\n")
    fake.add("docs/deep/README.md", "deep\n")
    assert ok(await call(env, url=url))
    assert fake.operations == ["GetRepositoryFile"]


async def test_ref_type_heads_fetches_branches_only(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("app/x.rb", "topic\n", at=TOPIC_SHA)
    ok(await call(env, url=f"{BLOB}/my-topic/with-slash/app/x.rb?ref_type=heads"))
    assert fake.operations == ["GetRepositoryFileBranchNames", "GetRepositoryFile"]
    variables = fake.variables()
    assert variables["refType"] == "HEADS"
    assert variables["commitRef"] == "refs/heads/my-topic/with-slash"


async def test_ref_type_tags_fetches_tags_only(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("VERSION", "1.0.0\n", at=TAG_SHA)
    out = ok(await call(env, url=f"{BLOB}/v1.0.0/VERSION?ref_type=tags"))
    assert (out["ref"], out["commit_sha"]) == ("v1.0.0", TAG_SHA)
    assert fake.variables()["refType"] == "TAGS" and fake.variables()["commitRef"] == "refs/tags/v1.0.0"
    fake.add("notes/q1.md", "notes\n", at=RELEASE_SHA)
    ok(await call(env, url=f"{BLOB}/release/2026/q1/notes/q1.md?ref_type=tags"))
    assert fake.operations[1:] == ["REST tags", "GetRepositoryFile"]


@pytest.mark.parametrize("view", ["raw", "blame"])
async def test_raw_and_blame_urls(env: ToolEnv, fake: FakeRepoGitLab, view: str) -> None:
    fake.add("README.md", "hi\n")
    assert ok(await call(env, url=f"{GITLAB}/{PROJECT}/-/{view}/main/README.md"))["content"] == "hi\n"


async def test_percent_encoded_path_is_decoded_once(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("docs/my file%20.md", "odd name\n")
    out = ok(await call(env, url=f"{BLOB}/main/docs/my%20file%2520.md"))
    assert out["path"] == "docs/my file%20.md"


# -- only the configured GitLab --------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example.com/grp/sub/proj/-/blob/main/README.md",
        "https://gitlab.example.com.evil.io/grp/sub/proj/-/blob/main/README.md",
        "https://gitlab.example.com:8443/grp/sub/proj/-/blob/main/README.md",
        "http://gitlab.example.com/grp/sub/proj/-/blob/main/README.md",
        "https://evil.example.com@gitlab.example.com.evil.io/grp/sub/proj/-/blob/main/README.md",
        "ftp://gitlab.example.com/grp/sub/proj/-/blob/main/README.md",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "gitlab.example.com/grp/sub/proj/-/blob/main/README.md",
    ],
)
async def test_url_elsewhere_is_refused_with_no_request_at_all(
    env: ToolEnv, fake: FakeRepoGitLab, url: str
) -> None:
    err = error(await call(env, url=url))
    assert err["reason"] == "bad_request"
    assert "gitlab.example.com" in err["message"]
    assert fake.requests == []


async def test_default_port_counts_as_given(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("README.md", "hi\n")
    assert ok(await call(env, url=f"https://GitLab.Example.com:443/{PROJECT}/-/blob/main/README.md"))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"{GITLAB}/{PROJECT}/-/tree/main/app", "is a directory (/-/tree/) URL"),
        (f"{GITLAB}/{PROJECT}/blob/main/README.md", "is not a file (blob, raw or blame) URL"),
        (f"{BLOB}/main", f"Invalid file URL: no file path found after the ref in {BLOB}/main"),
        (f"{BLOB}/main/", f"Invalid file URL: no file path found after the ref in {BLOB}/main/"),
        (f"{BLOB}/feature/with-slash/app/", "url must name a file, not a directory"),
        (f"{BLOB}/main/../../etc/passwd", "url must not contain a path traversal sequence"),
        (f"{BLOB}/main/%2E%2E/secret", "url must not contain a path traversal sequence"),
        (f"{BLOB}/main/a.txt?ref_type=branches", "GitLab accepts ref_type=heads or ref_type=tags"),
        (f"{GITLAB}/grp/../x/-/blob/main/a.txt", "has empty, `.` or `..` segments"),
    ],
)
async def test_bad_urls_are_refused_before_any_request(
    env: ToolEnv, fake: FakeRepoGitLab, url: str, message: str
) -> None:
    err = error(await call(env, url=url))
    assert err["reason"] == "bad_request"
    assert message in err["message"]
    assert fake.requests == []


async def test_directory_urls_point_to_the_listing_tool(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    # Agents paste directory pages: list_repository_tree takes them.
    tree = error(await call(env, url=f"{GITLAB}/{PROJECT}/-/tree/main/app"))
    assert tree == {
        "reason": "bad_request",
        "message": f"The URL '{GITLAB}/{PROJECT}/-/tree/main/app' is a directory (/-/tree/) URL, and a file "
        "is read one at a time: list the directory with list_repository_tree (it takes this URL), then "
        f"give the URL or path of a file in it ({GITLAB}/<group>/<project>/-/blob/<ref>/<path>). Or pass "
        "project_id, file_path and ref.",
    }
    slash = error(await call(env, url=f"{BLOB}/main/app/"))
    assert slash == {
        "reason": "bad_request",
        "message": "url must name a file, not a directory: 'main/app/'. This tool reads one file: list the "
        "directory with list_repository_tree, then pass the URL or path of a file in it.",
        "field": "url",
    }
    assert fake.requests == []


# -- url with the other arguments ------------------------------------------------------------


async def test_agreeing_arguments(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("README.md", "hi\n")
    url = f"{BLOB}/main/README.md"
    for extra in (
        {"project_id": PROJECT},
        {"project_id": "GRP/sub/proj"},
        {"project_id": "grp%2Fsub%2Fproj"},
        {"project_id": str(PROJECT_ID)},
        {"file_path": "/README.md"},
        {"ref": "main"},
        {"project_id": PROJECT, "file_path": "README.md", "ref": "main"},
    ):
        assert ok(await call(env, url=url, **extra))["content"] == "hi\n", extra


@pytest.mark.parametrize(
    ("extra", "message", "field"),
    [
        (
            {"project_id": "other/proj"},
            "Project mismatch: project_id is 'other/proj' but url contains 'grp/sub/proj'",
            "project_id",
        ),
        (
            {"file_path": "LICENSE"},
            "File path mismatch: file_path is 'LICENSE' but url contains 'README.md'",
            "file_path",
        ),
        ({"ref": "develop"}, "Ref mismatch: ref is 'develop' but url contains 'main'", "ref"),
        (
            {"ref": "develop", "file_path": "README.md"},
            "Ref mismatch: ref is 'develop' but url contains 'main'",
            "ref",
        ),
    ],
)
async def test_disagreement_names_the_field_and_sends_nothing(
    env: ToolEnv, fake: FakeRepoGitLab, extra: dict[str, Any], message: str, field: str
) -> None:
    err = error(await call(env, url=f"{BLOB}/main/README.md", **extra))
    assert err == {"reason": "bad_request", "message": message, "field": field}
    assert fake.requests == []


async def test_numeric_project_id_must_be_the_urls_project(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("README.md", "secret-ish\n")
    result = await call(env, url=f"{BLOB}/main/README.md", project_id="7")
    err = error(result)
    assert (
        err["message"]
        == "Project mismatch: project_id is '7' but url contains 'grp/sub/proj' (project ID 42)"
    )
    assert err["field"] == "project_id"
    assert "secret-ish" not in str(result)


async def test_ref_or_file_path_settle_an_ambiguous_url_without_ref_names(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.add("app/x.rb", "on feature/with-slash\n", at=SLASH_SHA)
    url = f"{BLOB}/feature/with-slash/app/x.rb"
    by_ref = ok(await call(env, url=url, ref="feature/with-slash"))
    by_path = ok(await call(env, url=url, file_path="app/x.rb"))
    for out in (by_ref, by_path):
        assert (out["ref"], out["path"], out["commit_sha"]) == ("feature/with-slash", "app/x.rb", SLASH_SHA)
    assert fake.operations == ["GetRepositoryFile", "GetRepositoryFile"]


async def test_ambiguous_url_mismatch_quotes_the_whole_ref_and_path(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    err = error(await call(env, url=f"{BLOB}/feature/with-slash/app/x.rb", ref="develop"))
    assert err["message"].startswith(
        "Ref mismatch: ref is 'develop' but url contains 'feature/with-slash/app/x.rb' (its ref and file "
        "path)"
    )
    err = error(await call(env, url=f"{BLOB}/feature/with-slash/app/x.rb", file_path="x.py"))
    assert err["message"] == (
        "File path mismatch: file_path is 'x.py' but url contains 'feature/with-slash/app/x.rb'"
    )
    assert fake.requests == []


# -- line anchors ----------------------------------------------------------------------------


async def test_line_anchor_opens_the_window_there(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("f.txt", "".join(f"{i}\n" for i in range(1, 101)))
    out = ok(await call(env, url=f"{BLOB}/main/f.txt#L10-20"))
    assert out["metadata"]["returned_lines"] == {"start": 10, "end": 20}
    assert out["content"] == "".join(f"{i}\n" for i in range(10, 21))
    single = ok(await call(env, url=f"{BLOB}/main/f.txt#L95"))
    assert single["metadata"]["returned_lines"] == {"start": 95, "end": 100}
    explicit = ok(await call(env, url=f"{BLOB}/main/f.txt#L10-20", offset=0, limit=2))
    assert explicit["content"] == "1\n2\n"
