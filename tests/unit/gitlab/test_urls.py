"""GitLab identifiers: base URL normal form, encoding exactly once, pipeline URLs, global IDs."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.gitlab.errors import InvalidReference
from gateway.gitlab.urls import (
    GitLabBase,
    encode_project,
    global_id,
    global_id_number,
    global_id_number_or_none,
    normalize_base_url,
    parse_pipeline_url,
    parse_project_url,
    project_full_path,
)


@pytest.mark.parametrize(
    ("configured", "url", "sub_path"),
    [
        ("https://gitlab.example.com", "https://gitlab.example.com", ""),
        ("https://gitlab.example.com/", "https://gitlab.example.com", ""),
        ("https://gitlab.example.com/api/v4", "https://gitlab.example.com", ""),
        ("https://gitlab.example.com/api/v4/", "https://gitlab.example.com", ""),
        ("https://gitlab.example.com/api/graphql", "https://gitlab.example.com", ""),
        (" https://GitLab.Example.com:8443/ ", "https://gitlab.example.com:8443", ""),
        ("https://h.example.com/gitlab", "https://h.example.com/gitlab", "/gitlab"),
        ("https://h.example.com/gitlab/", "https://h.example.com/gitlab", "/gitlab"),
        ("https://h.example.com/gitlab/api/v4", "https://h.example.com/gitlab", "/gitlab"),
        ("https://h.example.com/gitlab/api/v4/", "https://h.example.com/gitlab", "/gitlab"),
        ("http://127.0.0.1:8929/a/b/api/v4", "http://127.0.0.1:8929/a/b", "/a/b"),
    ],
)
def test_base_url_normal_form(configured: str, url: str, sub_path: str) -> None:
    base = normalize_base_url(configured)
    assert base.url == url
    assert base.sub_path == sub_path
    assert base.api_url == url + "/api/v4"
    assert base.graphql_url == url + "/api/graphql"


@pytest.mark.parametrize(
    ("configured", "says"),
    [
        ("gitlab.example.com", "must be http(s)://host"),
        ("ftp://gitlab.example.com", "must be http(s)://host"),
        ("https://", "must be http(s)://host"),
        ("https://user:secret@gitlab.example.com", "must not carry credentials"),
        ("https://gitlab.example.com/?private_token=x", "must not carry a query string"),
        ("https://gitlab.example.com:99999", "has no usable port: give a number from 1 to 65535"),
        ("https://gitlab.example.com:abc", "has no usable port"),
        ("https://gitlab.example.com:0", "has no usable port"),
    ],
)
def test_unusable_base_urls_are_refused(configured: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        normalize_base_url(configured)


@pytest.mark.parametrize(
    ("configured", "path", "web_url"),
    [
        ("https://h.example.com", "/g/p/-/pipelines/1", "https://h.example.com/g/p/-/pipelines/1"),
        ("https://h.example.com", "g/p/-/jobs/2", "https://h.example.com/g/p/-/jobs/2"),
        # GitLab's path fields carry the relative URL root already: never doubled...
        (
            "https://h.example.com/gitlab",
            "/gitlab/g/p/-/pipelines/1",
            "https://h.example.com/gitlab/g/p/-/pipelines/1",
        ),
        # ...and a path without it is joined under it: never dropped.
        (
            "https://h.example.com/gitlab",
            "/g/p/-/pipelines/1",
            "https://h.example.com/gitlab/g/p/-/pipelines/1",
        ),
        (
            "https://h.example.com/gitlab",
            "/gitlabber/p/-/pipelines/1",
            "https://h.example.com/gitlab/gitlabber/p/-/pipelines/1",
        ),
    ],
)
def test_web_url(configured: str, path: str, web_url: str) -> None:
    assert normalize_base_url(configured).web_url(path) == web_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("grp/sub/proj", "grp/sub/proj"),
        ("grp%2Fsub%2Fproj", "grp/sub/proj"),
        ("grp%2fsub%2fproj", "grp/sub/proj"),
        ("/grp/proj/", "grp/proj"),
        ("  my.group/my_project-2 ", "my.group/my_project-2"),
    ],
)
def test_project_full_path_decodes_exactly_once(given: str, expected: str) -> None:
    assert project_full_path(given) == expected


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("", "numeric ID or a full path"),
        ("%2F", "numeric ID or a full path"),
        ("grp%252Fproj", "looks URL-encoded twice"),
        ("proj", "lacks its namespace"),
        ("grp/../admin", "`.` or `..` segments"),
        ("grp//proj", "`.` or `..` segments"),
        ("grp/./proj", "`.` or `..` segments"),
        ("grp/pro j", "is not a GitLab path"),
        ("grp/-proj", "is not a GitLab path"),
        ("grp/proj?x=1", "is not a GitLab path"),
        ("grp/pröj", "is not a GitLab path"),
        ("https://gitlab.example.com/grp/proj", "is a URL; give the project's full path"),
    ],
)
def test_impossible_project_paths_are_bad_requests(given: str, says: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        project_full_path(given)
    assert says in caught.value.message


@pytest.mark.parametrize(
    ("given", "encoded"),
    [
        (42, "42"),
        ("42", "42"),
        (" 7 ", "7"),
        ("grp/sub/proj", "grp%2Fsub%2Fproj"),
        ("grp%2Fsub%2Fproj", "grp%2Fsub%2Fproj"),
        ("g.x/p_y-z", "g.x%2Fp_y-z"),
    ],
)
def test_encode_project_encodes_exactly_once(given: str | int, encoded: str) -> None:
    assert encode_project(given) == encoded
    assert encode_project(encode_project(given)) == encoded


def test_encode_project_refuses_ids_that_cannot_exist() -> None:
    for bad in (0, -3, True, "٣"):  # zero, negative, a bool, a non-ASCII digit
        with pytest.raises(InvalidReference):
            encode_project(bad)


_SEGMENT = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,12}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)


@given(st.lists(_SEGMENT, min_size=2, max_size=5))
def test_plain_and_encoded_paths_always_agree(segments: list[str]) -> None:
    path = "/".join(segments)
    encoded = quote(path, safe="")
    assert project_full_path(path) == project_full_path(encoded) == path
    assert encode_project(path) == encode_project(encoded) == encoded


# -- pipeline URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "url", "project", "pipeline_id"),
    [
        (
            "https://gitlab.example.com",
            "https://gitlab.example.com/grp/sub/proj/-/pipelines/42",
            "grp/sub/proj",
            42,
        ),
        (
            "https://gitlab.example.com",
            "https://GITLAB.example.com:443/g/p/-/pipelines/7/failures?x=1#f",
            "g/p",
            7,
        ),
        ("https://h.example.com/gitlab", "https://h.example.com/gitlab/g/p/-/pipelines/9", "g/p", 9),
        ("http://127.0.0.1:8929", "http://127.0.0.1:8929/g/p/-/pipelines/3/", "g/p", 3),
    ],
)
def test_pipeline_urls_of_the_configured_gitlab(
    configured: str, url: str, project: str, pipeline_id: int
) -> None:
    ref = parse_pipeline_url(normalize_base_url(configured), url)
    assert (ref.project, ref.pipeline_id) == (project, pipeline_id)


@pytest.mark.parametrize(
    ("configured", "url", "says"),
    [
        (
            "https://gitlab.example.com",
            "https://evil.example.com/g/p/-/pipelines/1",
            "is not on this gateway's GitLab",
        ),
        ("https://gitlab.example.com", "https://gitlab.example.com:8443/g/p/-/pipelines/1", "is not on this"),
        ("https://gitlab.example.com", "http://gitlab.example.com/g/p/-/pipelines/1", "is not on this"),
        ("https://gitlab.example.com", "file:///etc/passwd", "is not on this"),
        ("https://h.example.com/gitlab", "https://h.example.com/g/p/-/pipelines/1", "is not on this"),
        (
            "https://gitlab.example.com",
            "https://gitlab.example.com/g/p/-/merge_requests/3",
            "is not a pipeline URL",
        ),
        (
            "https://gitlab.example.com",
            "https://gitlab.example.com/g/p/-/pipelines/abc",
            "is not a pipeline URL",
        ),
        ("https://gitlab.example.com", "https://gitlab.example.com/-/pipelines/1", "names no project"),
        (
            "https://gitlab.example.com",
            "https://gitlab.example.com/../x/-/pipelines/1",
            "`.` or `..` segments",
        ),
        ("https://gitlab.example.com", "https://gitlab.example.com/g/p/-/pipelines/0", "positive integer"),
        (
            "https://gitlab.example.com",
            "https://evil.com\\@gitlab.example.com/g/p/-/pipelines/1",
            "is not on this gateway's GitLab",
        ),
        ("https://gitlab.example.com", "https://x:y@gitlab.example.com/g/p/-/pipelines/1", "is not on this"),
    ],
)
def test_other_urls_are_bad_requests(configured: str, url: str, says: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        parse_pipeline_url(normalize_base_url(configured), url)
    assert says in caught.value.message


@pytest.mark.parametrize(
    "url",
    [
        "https://gitlab.example.com/g/sub/p",
        "https://gitlab.example.com/g/sub/p/",
        "https://gitlab.example.com/g/sub/p.git",
        "https://gitlab.example.com/g/sub/p/-/pipelines",
    ],
)
def test_a_project_url_may_be_a_page_of_it_or_its_clone_url(url: str) -> None:
    assert parse_project_url(normalize_base_url("https://gitlab.example.com"), url) == "g/sub/p"


def test_same_instance() -> None:
    base = GitLabBase(url="https://h.example.com/gitlab", origin="https://h.example.com", sub_path="/gitlab")
    assert base.same_instance("https://h.example.com/gitlab/a/b") == "/a/b"
    assert base.same_instance("https://h.example.com:99999/gitlab/a") is None
    assert base.same_instance("https://h.example.com/gitlabx/a") is None
    assert base.same_instance("https://H.example.com:443/gitlab/a") == "/a"
    assert base.same_instance("https://evil.com\\@h.example.com/gitlab/a") is None
    assert base.same_instance("https://x:y@h.example.com/gitlab/a") is None
    assert base.same_instance("https://@h.example.com/gitlab/a") is None
    assert base.same_instance("https://h.example.com\\.evil.com/gitlab/a") is None


# -- global IDs ------------------------------------------------------------------------------------------


def test_global_ids() -> None:
    assert global_id("Ci::Pipeline", 987654) == "gid://gitlab/Ci::Pipeline/987654"
    assert global_id_number("gid://gitlab/Ci::Build/111") == 111
    assert global_id_number("gid://gitlab/Ci::Bridge/2") == 2
    for bad in ("111", "gid://gitlab/Ci::Build/", "gid://gitlab/Ci::Build/1x", None, 5):
        with pytest.raises(ValueError, match="not a global ID"):
            global_id_number(bad)
        assert global_id_number_or_none(bad) is None
    assert global_id_number_or_none("gid://gitlab/Ai::DuoWorkflows::Workflow/7") == 7


def test_project_address_and_node_by_path_and_by_id() -> None:
    from pydantic import BaseModel

    from gateway.gitlab.operation import ByPathOrId
    from gateway.gitlab.urls import project_address

    class Project(BaseModel):
        fullPath: str

    def project_node(data: dict[str, object], by_id: bool) -> dict[str, object] | None:
        node = ByPathOrId[Project].model_validate(data).project_node()
        return node.model_dump() if node else None

    assert project_address("grp/sub/proj", None) == {
        "byId": False,
        "fullPath": "grp/sub/proj",
        "projectIds": [],
    }
    assert project_address(None, 42) == {
        "byId": True,
        "fullPath": "",
        "projectIds": ["gid://gitlab/Project/42"],
    }
    assert project_node({"project": {"fullPath": "g/p"}}, by_id=False) == {"fullPath": "g/p"}
    assert project_node({"project": None}, by_id=False) is None
    assert project_node({"projects": {"nodes": [{"fullPath": "g/p"}]}}, by_id=True) == {"fullPath": "g/p"}
    assert project_node({"projects": {"nodes": []}}, by_id=True) is None
