"""``get_repository_file`` (https://docs.gitlab.com/api/graphql/reference/#repositoryblob), every branch.

GitLab is :class:`FakeRepoGitLab` behind respx: each GraphQL document is validated and executed
against GitLab's complete schema, and every request is recorded, so the tests check what a
caller sees (``structuredContent``, texts, ``isError``) and what GitLab received (how many
requests, which operation, which variables). URL flows are in ``test_repository_files_urls.py``;
the cache in ``test_repository_files_cache.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from graphql import OperationDefinitionNode, parse, validate
from jsonschema import Draft202012Validator

from gateway.config import Settings
from gateway.gitlab.credentials import ANONYMOUS
from gateway.tools import all_tools
from gateway.tools.repository.checks import is_excluded
from gateway.tools.repository.target import normalize_file_path
from gateway.tools.visibility import ANONYMOUS_READS
from tests.conftest import REPO
from tests.unit.gitlab.fake_gitlab import gitlab_schema
from tests.unit.gitlab.tool_env import ToolEnv
from tests.unit.tools.repository_files_fake import (
    MAIN_SHA,
    PROJECT,
    PROJECT_ID,
    TAG_SHA,
    FakeRepoGitLab,
)

TOOL = "get_repository_file"


@pytest.fixture
def fake() -> FakeRepoGitLab:
    return FakeRepoGitLab()


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
async def env(settings: Settings, fake: FakeRepoGitLab) -> AsyncIterator[ToolEnv]:
    # assert_all_mocked: a request to anything but the fake (another host) fails the test.
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        fake.mount(router)
        async with httpx.AsyncClient() as http:
            yield ToolEnv(settings, http)


def _schema() -> dict[str, Any]:
    schema = next(t for t in all_tools() if t.name == TOOL).output_schema()
    assert schema is not None
    return schema


def ok(result: dict[str, Any]) -> dict[str, Any]:
    """structuredContent of a success, checked against outputSchema and the JSON text block."""
    assert not result.get("isError"), result
    structured: dict[str, Any] = result["structuredContent"]
    assert json.loads(result["content"][-1]["text"]) == structured
    Draft202012Validator(_schema()).validate(structured)
    return structured


def error(result: dict[str, Any]) -> dict[str, Any]:
    """structuredContent.error of a failure; its message is the first text block."""
    assert result.get("isError") is True, result
    err: dict[str, Any] = result["structuredContent"]["error"]
    assert result["content"][0]["text"] == err["message"]
    # Every tool error names its request id (the id on the gateway\'s log lines for the call).
    assert err.pop("request_id", None), err
    return err


async def call(env: ToolEnv, **args: Any) -> dict[str, Any]:
    return await env.call(TOOL, args)


# -- the declaration -------------------------------------------------------------------------


def test_declaration_matches_gitlab() -> None:
    tool = next(t for t in all_tools() if t.name == TOOL)
    mcp = tool.to_mcp()
    assert tool.toolset == "repository"
    assert mcp["annotations"]["readOnlyHint"] is True
    assert mcp["annotations"]["destructiveHint"] is False
    schema = mcp["inputSchema"]
    assert schema.get("required", []) == []
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert set(props) == {"url", "project_id", "file_path", "ref", "offset", "limit"}
    assert props["offset"] == {**props["offset"], "type": "integer", "minimum": 0, "default": 0}
    assert (
        props["limit"]["minimum"] == 1
        and props["limit"]["maximum"] == 2000
        and props["limit"]["default"] == 500
    )
    for name in ("url", "project_id", "file_path", "ref"):
        assert props[name]["type"] == "string", name
    assert "HEAD" in props["ref"]["description"]


# -- happy path ------------------------------------------------------------------------------


async def test_reads_a_file_in_one_graphql_request(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("app/models/user.rb", "class User\n  def name = @name\nend\n")
    out = ok(await call(env, project_id=PROJECT, file_path="app/models/user.rb", ref="main"))
    assert out == {
        "path": "app/models/user.rb",
        "ref": "main",
        "commit_sha": MAIN_SHA,
        "metadata": {
            "total_lines": 3,
            "returned_lines": {"start": 1, "end": 3},
            "truncated": False,
            "size_bytes": 34,
            "cap_reason": None,
            "fetch_truncated": False,
        },
        "content": "class User\n  def name = @name\nend\n",
    }
    assert fake.operations == ["GetRepositoryFile"]
    assert fake.variables() == {
        "byId": False,
        "fullPath": PROJECT,
        "projectIds": [],
        "ref": "main",
        "commitRef": "main",
        "paths": ["app/models/user.rb"],
    }


async def test_head_is_the_default_branch_and_the_default_ref(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("README.md", "on main\n", at=MAIN_SHA)
    with_head = ok(await call(env, project_id=PROJECT, file_path="README.md", ref="HEAD"))
    without_ref = ok(await call(env, project_id=PROJECT, file_path="README.md"))
    assert with_head["content"] == without_ref["content"] == "on main\n"
    assert with_head["ref"] == without_ref["ref"] == "HEAD"
    assert with_head["commit_sha"] == MAIN_SHA
    assert [v["ref"] for v in (fake.variables(0), fake.variables(1))] == ["HEAD", "HEAD"]


async def test_numeric_project_id_uses_projects_by_global_id(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("a.txt", "x\n")
    for project_id in (PROJECT_ID, str(PROJECT_ID)):
        assert ok(await call(env, project_id=project_id, file_path="a.txt", ref="v1.0.0"))["content"] == "x\n"
    # The same document as for a path: projects(ids:) included, project(fullPath:) skipped.
    assert fake.operations == ["GetRepositoryFile"] * 2
    assert fake.variables()["byId"] is True
    assert fake.variables()["projectIds"] == [f"gid://gitlab/Project/{PROJECT_ID}"]
    assert fake.variables()["fullPath"] == ""


async def test_project_path_and_file_path_are_encoded_exactly_once(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.add("docs/100% done & dusted.txt", "done\n")
    out = ok(
        await call(env, project_id="grp%2Fsub%2Fproj", file_path="docs/100% done & dusted.txt", ref="main")
    )
    assert out["path"] == "docs/100% done & dusted.txt"
    # GraphQL variables travel as JSON: the project decoded once, the file path never decoded.
    assert fake.variables()["fullPath"] == "grp/sub/proj"
    assert fake.variables()["paths"] == ["docs/100% done & dusted.txt"]


async def test_a_tag_and_a_full_sha_are_refs_too(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("VERSION", "1.0.0\n", at=TAG_SHA)
    assert ok(await call(env, project_id=PROJECT, file_path="VERSION", ref="v1.0.0"))["commit_sha"] == TAG_SHA
    assert ok(await call(env, project_id=PROJECT, file_path="VERSION", ref=TAG_SHA))["content"] == "1.0.0\n"


# -- windows ---------------------------------------------------------------------------------


def _numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


async def test_default_window_is_500_lines_and_next_says_where_to_continue(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.add("big.txt", _numbered(1200))
    out = ok(await call(env, project_id=PROJECT, file_path="big.txt", ref="main"))
    assert out["metadata"]["returned_lines"] == {"start": 1, "end": 500}
    assert out["metadata"]["total_lines"] == 1200
    assert out["metadata"]["truncated"] is True
    assert out["content"] == _numbered(500)
    assert out["next"] == {"offset": 500, "limit": 500}
    assert out["system_instruction"] == (
        'File truncated. Remaining lines: 700. To view more, call again with {"offset": 500, "limit": 500}. '
        "To keep reading this same version from the gateway's cache, also pass "
        f'"ref": "{MAIN_SHA}".'
    )


async def test_windows_abut_and_the_last_has_no_next(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    text = "a\r\nb\n\nno newline at the end"
    fake.add("f.txt", text)
    parts, offset = [], 0
    while True:
        out = ok(await call(env, project_id=PROJECT, file_path="f.txt", ref=MAIN_SHA, offset=offset, limit=3))
        parts.append(out["content"])
        if "next" not in out:
            break
        offset = out["next"]["offset"]
    assert "".join(parts) == text
    assert out["metadata"] == {
        "total_lines": 4,
        "returned_lines": {"start": 4, "end": 4},
        "truncated": True,
        "size_bytes": len(text.encode()),
        "cap_reason": None,
        "fetch_truncated": False,
    }
    assert "system_instruction" not in out


async def test_offset_past_the_end_says_so(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("f.txt", _numbered(10))
    out = ok(await call(env, project_id=PROJECT, file_path="f.txt", ref="main", offset=10))
    assert out["content"] == ""
    assert out["metadata"]["returned_lines"] is None
    assert "next" not in out
    assert out["system_instruction"] == (
        "Offset 10 is past the end of the file (10 lines). Call again with an offset below 10."
    )


async def test_empty_file(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("empty.txt", "")
    out = ok(await call(env, project_id=PROJECT, file_path="empty.txt", ref="main"))
    assert out["content"] == ""
    assert out["metadata"] == {
        "total_lines": 0,
        "returned_lines": None,
        "truncated": False,
        "size_bytes": 0,
        "cap_reason": None,
        "fetch_truncated": False,
    }
    assert "next" not in out and "system_instruction" not in out


async def test_window_over_1_mib_drops_whole_trailing_lines(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    line = "x" * 299_999 + "\n"  # 300,000 bytes: three fit in 1 MiB, four do not
    fake.add("wide.txt", line * 6)
    out = ok(await call(env, project_id=PROJECT, file_path="wide.txt", ref="main", limit=5))
    assert out["content"] == line * 3
    assert out["metadata"]["returned_lines"] == {"start": 1, "end": 3}
    assert out["metadata"]["cap_reason"] == "dropped_lines"
    assert out["metadata"]["truncated"] is True
    assert out["next"] == {"offset": 3, "limit": 5}
    assert out["system_instruction"].endswith(
        "The window was shortened to stay within the 1048576 byte response limit."
    )


async def test_a_line_over_1_mib_is_cut_on_a_character_boundary(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    huge = "é" * 600_000 + "\n"  # 1,200,001 bytes on one line
    fake.add("min.js", huge + "tail\n")
    out = ok(await call(env, project_id=PROJECT, file_path="min.js", ref="main"))
    assert out["content"] == "é" * 524_288  # 1 MiB exactly, no half character, no U+FFFD
    assert "\ufffd" not in out["content"]
    assert out["metadata"]["cap_reason"] == "line_cut"
    assert out["metadata"]["returned_lines"] == {"start": 1, "end": 1}
    assert out["next"] == {"offset": 1, "limit": 500}
    assert out["system_instruction"].endswith(
        "A line exceeded the 1048576 byte response limit and was cut; its remainder is not retrievable due "
        "to size."
    )


@pytest.mark.parametrize(
    ("args", "wrong"),
    [
        ({"limit": 2001}, "limit"),
        ({"limit": 0}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": "x"}, "offset"),
    ],
)
async def test_window_arguments_are_checked_before_any_request(
    env: ToolEnv, fake: FakeRepoGitLab, args: dict[str, Any], wrong: str
) -> None:
    err = error(await call(env, project_id=PROJECT, file_path="a", ref="main", **args))
    assert err["reason"] == "bad_request"
    assert err["invalid_arguments"] == [wrong]
    assert fake.requests == []


# -- binary, LFS, truncated by GitLab --------------------------------------------------------


async def test_binary_file(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    err = error(await call(env, project_id=PROJECT, file_path="logo.png", ref="main"))
    assert err == {
        "reason": "bad_request",
        "message": "File 'logo.png' is binary and cannot be returned as text. Size: 272 bytes.",
        "kind": "binary",
        "path": "logo.png",
        "ref": "main",
        "size_bytes": 272,
    }
    assert len(fake.requests) == 1


async def test_lfs_pointer(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 52428800\n"
    fake.add("assets/model.bin", pointer, lfs_size=52_428_800)
    err = error(await call(env, project_id=PROJECT, file_path="assets/model.bin", ref="main"))
    assert err["message"] == (
        "File 'assets/model.bin' is stored in LFS (lfs) and its content cannot be read with this tool. "
        "Size: 52428800 bytes."
    )
    assert err["kind"] == "lfs" and err["size_bytes"] == 52_428_800 and err["reason"] == "bad_request"


async def test_file_truncated_by_gitlab_is_flagged_with_both_sizes(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    part = "2026-01-15 INFO served\n" * 10 + "2026-01-15 INFO cut in the mid"
    fake.add("logs/big.log", part, full_size=20 * 1024 * 1024)
    out = ok(await call(env, project_id=PROJECT, file_path="logs/big.log", ref="main"))
    assert out["content"] == part
    assert out["metadata"] == {
        "total_lines": 11,
        "returned_lines": {"start": 1, "end": 11},
        "truncated": True,
        "size_bytes": 20 * 1024 * 1024,
        "cap_reason": None,
        "fetch_truncated": True,
    }
    assert out["system_instruction"] == (
        "This file is larger than the read limit, so total_lines counts only the portion that was "
        f"retrieved. size_bytes is the full size. GitLab returned {len(part)} of 20971520 bytes; the rest "
        "cannot be read with this tool."
    )


async def test_text_that_is_not_utf8_is_a_clear_error(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.graphql_errors.append(
        'String "caf\\xE9" was encoded as ASCII-8BIT! GraphQL requires an encoding compatible with UTF-8.'
    )
    err = error(await call(env, project_id=PROJECT, file_path="latin1.txt", ref="main"))
    assert err["reason"] == "bad_request" and err["kind"] == "not_utf8"
    assert err["message"].startswith(
        "File 'latin1.txt' is not valid UTF-8 text, so GitLab cannot return it as text"
    )


# -- not found -------------------------------------------------------------------------------


async def test_missing_ref_is_told_apart_in_one_request(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("README.md", "hi\n")
    err = error(await call(env, project_id=PROJECT, file_path="README.md", ref="no-such-branch"))
    assert err == {
        "reason": "not_found",
        "message": "Ref 'no-such-branch' not found. Provide an existing branch name, tag name, or commit "
        "SHA, or use HEAD for the default branch.",
        "kind": "ref_not_found",
        "ref": "no-such-branch",
    }
    assert len(fake.requests) == 1  # GitLab's tool needs 2; the issue allows at most 2


async def test_missing_file_is_told_apart_in_one_request(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    err = error(await call(env, project_id=PROJECT, file_path="lib/nope.rb", ref="main"))
    assert err == {
        "reason": "not_found",
        "message": "File 'lib/nope.rb' does not exist at ref 'main'. The path must be relative to the "
        "repository root, and is case-sensitive. Do not retry the same path; find the file's real path "
        f"first: list_repository_tree with project_id '{PROJECT}', ref 'main' and folder_path 'lib' lists "
        "the files there (`recursive: true` lists every path below it). A link to the file in GitLab's "
        "web UI has it too, and the url argument takes such a link.",
        "kind": "file_not_found",
        "path": "lib/nope.rb",
        "ref": "main",
    }
    assert len(fake.requests) == 1


async def test_empty_repository(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.empty = True
    err = error(await call(env, project_id=PROJECT, file_path="README.md", ref="HEAD"))
    assert err["message"] == (
        "Ref 'HEAD' not found. Provide an existing branch name, tag name, or commit SHA, or use HEAD for the "
        f"default branch. The repository of project '{PROJECT}' is empty: it has no commits yet."
    )


@pytest.mark.parametrize("project_id", ["grp/sub/nope", "999"])
async def test_unknown_or_hidden_project(env: ToolEnv, fake: FakeRepoGitLab, project_id: str) -> None:
    err = error(await call(env, project_id=project_id, file_path="README.md", ref="main"))
    assert err["reason"] == "not_found"
    assert err["message"] == f"Project '{project_id}' not found or inaccessible"
    anonymous = error(
        await env.call(TOOL, {"project_id": project_id, "file_path": "README.md"}, credential=ANONYMOUS)
    )
    assert anonymous["message"] == f"Project '{project_id}' not found or inaccessible. {ANONYMOUS_READS}"


# -- paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "file_path must not be empty"),
        ("  /  ", "file_path must not be empty"),
        ("app/models/", "file_path must be a file, not a directory: 'app/models/'"),
        ("../etc/passwd", "file_path must not contain a path traversal sequence: '../etc/passwd'"),
        ("app/../../secret", "file_path must not contain a path traversal sequence: 'app/../../secret'"),
        ("app/..", "file_path must not contain a path traversal sequence: 'app/..'"),
        ("app\\..\\x", "file_path must not contain a path traversal sequence: 'app\\..\\x'"),
        ("app/%2e%2e/x", "file_path must not contain a path traversal sequence: 'app/%2e%2e/x'"),
    ],
)
async def test_bad_paths_are_refused_before_any_request(
    env: ToolEnv, fake: FakeRepoGitLab, given: str, message: str
) -> None:
    err = error(await call(env, project_id=PROJECT, file_path=given, ref="main"))
    assert err == {"reason": "bad_request", "message": message, "field": "file_path"}
    assert fake.requests == []


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("/README.md", "README.md"),
        ("//a/b.txt", "a/b.txt"),
        ("./src//x.py", "src/x.py"),
        (" a.txt ", "a.txt"),
        ("dir/..x/y", "dir/..x/y"),
        ("100%.txt", "100%.txt"),
    ],
)
def test_path_normalisation(given: str, normal: str) -> None:
    assert normalize_file_path(given) == normal


async def test_leading_slash_is_stripped(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("README.md", "hi\n")
    assert ok(await call(env, project_id=PROJECT, file_path="/README.md", ref="main"))["path"] == "README.md"
    assert fake.variables()["paths"] == ["README.md"]


async def test_missing_identification(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    err = error(await call(env, file_path="README.md"))
    assert err["message"] == (
        "Provide either url, or project_id and file_path (ref is optional: HEAD, the default branch; "
        "missing: project_id)."
    )
    err = error(await call(env))
    assert err["message"] == (
        "Provide either url, or project_id and file_path (ref is optional: HEAD, the default branch; "
        "missing: project_id, file_path)."
    )
    assert fake.requests == []


@pytest.mark.parametrize("ref", ["", "   ", "main\nx"])
async def test_bad_ref(env: ToolEnv, fake: FakeRepoGitLab, ref: str) -> None:
    err = error(await call(env, project_id=PROJECT, file_path="a", ref=ref))
    assert err["reason"] == "bad_request" and err["field"] == "ref"
    assert fake.requests == []


async def test_bad_project_path(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    err = error(await call(env, project_id="grp/../x", file_path="a", ref="main"))
    assert err["reason"] == "bad_request" and err["invalid_arguments"] == ["project_id"]
    assert fake.requests == []


# -- Duo context exclusions ------------------------------------------------------------------


async def test_excluded_file_is_refused_before_any_content(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.exclusion_rules = ["*.env", "secrets/", "!secrets/README.md"]
    fake.add("config/prod.env", "PASSWORD=hunter2\n")
    result = await call(env, project_id=PROJECT, file_path="config/prod.env", ref="main")
    err = error(result)
    assert err == {
        "reason": "unauthorized",
        "message": "File 'config/prod.env' is excluded from AI context by this project's settings and cannot "
        "be read.",
        "kind": "excluded",
        "path": "config/prod.env",
    }
    assert "hunter2" not in json.dumps(result)


async def test_exclusion_is_checked_before_not_found(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.exclusion_rules = ["secrets/"]
    err = error(await call(env, project_id=PROJECT, file_path="secrets/none.txt", ref="no-such-ref"))
    assert err["kind"] == "excluded"


async def test_negated_rule_and_no_rules(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("secrets/README.md", "how we keep secrets\n")
    fake.exclusion_rules = ["secrets/*", "!secrets/README.md"]
    assert ok(await call(env, project_id=PROJECT, file_path="secrets/README.md", ref="main"))
    fake.exclusion_rules = None  # duoContextExclusionSettings: null (no license, or never set)
    assert ok(await call(env, project_id=PROJECT, file_path="secrets/README.md", ref="main"))
    fake.exclusion_rules = []
    assert ok(await call(env, project_id=PROJECT, file_path="secrets/README.md", ref="main"))


@pytest.mark.parametrize(
    ("rules", "path", "excluded"),
    [
        (("*.md",), "docs/a.md", True),
        (("/root.txt",), "sub/root.txt", False),
        (("/root.txt",), "root.txt", True),
        (("config/**/*.key",), "config/a/b/c.key", True),
        (("test",), "lib/test/x.rb", True),
        (("test", "!includetest"), "includetest", False),
        ((), "anything", False),
    ],
)
def test_exclusion_rules_are_gitignore_style(rules: tuple[str, ...], path: str, excluded: bool) -> None:
    assert is_excluded(rules, path) is excluded


@pytest.mark.gitlab_version("18.2.1", enterprise=False)
async def test_gitlab_ce_is_sent_the_document_without_the_exclusions_field(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.ce = True
    fake.add("a.txt", "ce\n")
    assert ok(await call(env, project_id=PROJECT, file_path="a.txt", ref="main"))["content"] == "ce\n"
    assert fake.operations == ["GetRepositoryFile"]  # one request: no refusal first
    assert "duoContextExclusionSettings" not in fake.requests[0]["query"]
    assert ok(await call(env, project_id=PROJECT_ID, file_path="a.txt", ref="main"))["content"] == "ce\n"
    assert fake.variables()["byId"] is True


@pytest.mark.gitlab_version("17.11.3-ee", enterprise=True)
async def test_gitlab_ee_before_the_exclusions_field_is_not_taken_for_ce(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.version = "17.11.3-ee"
    fake.add("a.txt", "ee\n")
    assert ok(await call(env, project_id=PROJECT, file_path="a.txt", ref="main"))["content"] == "ee\n"
    assert "duoContextExclusionSettings" not in fake.requests[0]["query"]
    assert env.services.gitlab.instance.info.edition.value == "ee"


async def test_a_ce_refusal_makes_the_gateway_read_the_version_and_send_the_ce_document(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    # The gateway believed the newest EE; GitLab refuses the EE field and says it is CE.
    fake.ce = True
    fake.add("a.txt", "ce\n")
    assert ok(await call(env, project_id=PROJECT, file_path="a.txt", ref="main"))["content"] == "ce\n"
    assert fake.operations == ["GetRepositoryFile", "InstanceMetadata", "GetRepositoryFile"]
    assert "duoContextExclusionSettings" not in fake.requests[2]["query"]
    # Remembered: the next read goes straight to the CE document.
    assert ok(await call(env, project_id=PROJECT_ID, file_path="a.txt", ref="main"))["content"] == "ce\n"
    assert fake.operations[3:] == ["GetRepositoryFile"]


@pytest.mark.parametrize(
    "message",
    [
        "duoContextExclusionSettings is temporarily unavailable",
        "Field 'duoContextExclusionSettings' doesn't exist on type 'Project'; Argument 'x' is invalid",
    ],
)
async def test_other_errors_naming_the_exclusions_field_keep_exclusions_on(
    env: ToolEnv, fake: FakeRepoGitLab, message: str
) -> None:
    fake.graphql_errors.append(message)
    fake.add("a.txt", "ee\n")
    err = error(await call(env, project_id=PROJECT, file_path="a.txt", ref="main"))
    assert err["reason"] == "bad_request"
    assert fake.operations == ["GetRepositoryFile"]
    assert ok(await call(env, project_id=PROJECT, file_path="a.txt", ref="main"))["content"] == "ee\n"
    assert fake.operations[1:] == ["GetRepositoryFile"]  # not the CE document: rules still read
    assert "duoContextExclusionSettings" in fake.requests[1]["query"]


async def test_a_field_the_version_should_have_but_lacks_is_unsupported_by_gitlab(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    # A GitLab that says it is the newest EE and still refuses a field (a feature flag turned off):
    # the version is read again, and the caller is told in the gateway's words, not GitLab's.
    fake.graphql_errors.append("Field 'duoContextExclusionSettings' doesn't exist on type 'Project'")
    fake.add("a.txt", "ee\n")
    err = error(await call(env, project_id=PROJECT, file_path="a.txt", ref="main"))
    assert err["reason"] == "unsupported_by_gitlab"
    assert "doesn't exist" not in err["message"]
    assert "Project.duoContextExclusionSettings" in err["message"] and "19.4.0 (EE)" in err["message"]
    assert fake.operations == ["GetRepositoryFile", "InstanceMetadata"]


# -- refs GitLab refuses, and the documents themselves ---------------------------------------


async def test_qualified_ref_names_are_read_through_ref_type(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.add("VERSION", "1.0.0\n", at=TAG_SHA)
    out = ok(await call(env, project_id=PROJECT, file_path="VERSION", ref="refs/tags/v1.0.0"))
    assert (out["ref"], out["commit_sha"]) == ("v1.0.0", TAG_SHA)
    assert fake.variables()["refType"] == "TAGS" and fake.variables()["commitRef"] == "refs/tags/v1.0.0"
    fake.add("README.md", "hi\n")
    assert (
        ok(await call(env, project_id=PROJECT, file_path="README.md", ref="refs/heads/main"))["ref"] == "main"
    )


async def test_a_ref_name_gitlab_calls_invalid_is_a_ref_not_found(env: ToolEnv, fake: FakeRepoGitLab) -> None:
    fake.graphql_errors.append("Ref is not valid")
    err = error(await call(env, project_id=PROJECT, file_path="README.md", ref="bad..ref"))
    assert err["kind"] == "ref_not_found" and err["reason"] == "not_found"
    assert err["message"].startswith("Ref 'bad..ref' not found. Provide an existing branch name")


async def test_no_permission_on_the_code_reads_as_project_not_found(
    env: ToolEnv, fake: FakeRepoGitLab
) -> None:
    fake.graphql_errors.append(
        "The resource that you are attempting to access does not exist or you don't have permission to "
        "perform this action"
    )
    err = error(await call(env, project_id=PROJECT, file_path="README.md", ref="main"))
    assert (err["reason"], err["message"]) == ("not_found", f"Project '{PROJECT}' not found or inaccessible")


OPERATIONS = sorted(
    (REPO / "gateway" / "gitlab" / "operations" / "repository").glob("get_repository_file*.graphql")
)


@pytest.mark.parametrize("path", OPERATIONS, ids=lambda p: p.stem)
def test_every_operation_is_valid_against_gitlabs_schema(path: Path) -> None:
    document = parse(path.read_text())
    assert validate(gitlab_schema(), document) == []
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    assert len(operations) == 1 and operations[0].name is not None  # plus its fragments


def test_there_are_operations() -> None:
    assert len(OPERATIONS) == 3  # file, access+exclusions, branch names
