"""GitLab file URLs (``gateway.gitlab.blob_urls``): parsing on the configured GitLab only, and the
ref/path split of GitLab's web UI (``ExtractsRef::RefExtractor#extract_ref``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
import respx

from gateway.cache import CacheRegistry
from gateway.config import GitLabSettings
from gateway.gitlab.blob_urls import (
    MAX_REF_PAGES,
    REF_PAGE_SIZE,
    TAG_PAGE_SIZE,
    BlobUrl,
    is_full_sha,
    needs_ref_names,
    parse_blob_url,
    resolve_url_ref,
    split_ref_and_path,
)
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.credentials import Credential
from gateway.gitlab.errors import InvalidReference
from gateway.gitlab.urls import GitLabBase, normalize_base_url

BASE = normalize_base_url("https://gitlab.example.com")
SUB = normalize_base_url("https://git.example.org:8443/gitlab/")
SHA = "0123456789abcdef0123456789abcdef01234567"


def parse(url: str, base: GitLabBase = BASE) -> BlobUrl:
    return parse_blob_url(url, base)


def refused(url: str, base: GitLabBase = BASE) -> str:
    with pytest.raises(InvalidReference) as info:
        parse_blob_url(url, base)
    return info.value.message


# -- parsing ---------------------------------------------------------------------------------


def test_blob_url() -> None:
    url = "https://gitlab.example.com/grp/sub/proj/-/blob/main/app/models/user.rb"
    assert parse(url) == BlobUrl(
        url=url, project_path="grp/sub/proj", ref_and_path="main/app/models/user.rb", view="blob"
    )


def test_raw_blame_query_and_anchor() -> None:
    got = parse("https://gitlab.example.com/g/p/-/raw/v1.0/a%20b.txt?ref_type=tags&inline=false#L3-9")
    assert (got.view, got.ref_type, got.ref_and_path, got.lines) == ("raw", "tags", "v1.0/a b.txt", (3, 9))
    blame = parse("https://gitlab.example.com/g/p/-/blame/main/x.py?ref_type=HEADS#L7")
    assert (blame.view, blame.ref_type, blame.lines) == ("blame", "heads", (7, None))
    assert parse("https://gitlab.example.com/g/p/-/blob/main/x.py#L9-L3").lines == (3, 9)
    assert parse("https://gitlab.example.com/g/p/-/blob/main/x.py#readme").lines is None


def test_sub_path_and_port_must_match() -> None:
    ok = parse("https://git.example.org:8443/gitlab/grp/proj/-/blob/main/README.md", SUB)
    assert ok.project_path == "grp/proj"
    for url in (
        "https://git.example.org:8443/grp/proj/-/blob/main/README.md",
        "https://git.example.org/gitlab/grp/proj/-/blob/main/README.md",
        "https://git.example.org:8443/gitlabx/grp/proj/-/blob/main/README.md",
    ):
        assert "is not on this gateway's GitLab (https://git.example.org:8443/gitlab" in refused(url, SUB)


def test_project_path_is_decoded_once() -> None:
    assert parse("https://gitlab.example.com/grp%2Fsub/proj/-/blob/main/a").project_path == "grp/sub/proj"
    assert "encoded twice" in refused("https://gitlab.example.com/grp%252Fsub/proj/-/blob/main/a")


def test_the_file_part_is_decoded_once() -> None:
    assert parse("https://gitlab.example.com/g/p/-/blob/main/100%2525.txt").ref_and_path == "main/100%25.txt"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("https://gitlab.example.com/g/p/-/blob/main/%FF.txt", "not valid UTF-8"),
        ("https://gitlab.example.com/g/p/-/blob/main/a%00b", "NUL"),
        ("https://gitlab.example.com/g/p/-/blob//a.txt", "no file path found after the ref"),
        ("https://gitlab.example.com/-/blob/main/a.txt", "names no project"),
        ("https://gitlab.example.com:notaport/g/p/-/blob/main/a.txt", "is not on this gateway's GitLab"),
        # A browser reads a backslash as "/": this is evil.com to it, gitlab.example.com to urlsplit.
        ("https://evil.com\\@gitlab.example.com/g/p/-/blob/main/a.py", "is not on this gateway's GitLab"),
        ("https://x:y@gitlab.example.com/g/p/-/blob/main/a.py", "is not on this gateway's GitLab"),
        ("https://gitlab.example.com@gitlab.example.com/g/p/-/blob/main/a.py", "is not on this gateway's"),
    ],
)
def test_malformed(url: str, fragment: str) -> None:
    assert fragment in refused(url)


def test_full_sha() -> None:
    assert is_full_sha(SHA) and is_full_sha(SHA.upper()) and is_full_sha("a" * 64)
    assert not is_full_sha(SHA[:39]) and not is_full_sha("g" * 40) and not is_full_sha("a" * 41)


# -- the split -------------------------------------------------------------------------------


def blob(ref_and_path: str) -> BlobUrl:
    return BlobUrl(url="u", project_path="g/p", ref_and_path=ref_and_path, view="blob")


@pytest.mark.parametrize(
    ("ref_and_path", "ambiguous"),
    [
        ("main/README.md", False),
        (f"{SHA}/a/b/c", False),
        ("HEAD/a/b", False),
        ("feature/x/y.rb", True),
        ("a*b/c/d", False),
        ("a b/c/d", False),
    ],
)
def test_when_ref_names_are_needed(ref_and_path: str, ambiguous: bool) -> None:
    assert needs_ref_names(blob(ref_and_path)) is ambiguous


NAMES = {"feature", "feature/with-slash", "my-topic/with-slash", "release/2026/q1", "release/2026"}


@pytest.mark.parametrize(
    ("ref_and_path", "names", "expected"),
    [
        # GitLab's documented case: the branch with slashes, and the first segment that is itself a branch
        ("my-topic/with-slash/app/x.rb", NAMES, ("my-topic/with-slash", "app/x.rb")),
        ("feature/with-slash/app/x.rb", NAMES, ("feature", "with-slash/app/x.rb")),
        # the longest ref that prefixes the rest
        ("release/2026/q1/notes.md", NAMES, ("release/2026/q1", "notes.md")),
        ("release/2026/notes.md", NAMES, ("release/2026", "notes.md")),
        # nothing matches: the first segment (GitLab's "try our best")
        ("nope/a/b", NAMES, ("nope", "a/b")),
        ("nope/a/b", set(), ("nope", "a/b")),
        ("main/README.md", None, ("main", "README.md")),
        # a name must end at a segment boundary
        ("release/2026x/a", {"release/2026"}, ("release", "2026x/a")),
    ],
)
def test_split_like_gitlabs_web_ui(
    ref_and_path: str, names: set[str] | None, expected: tuple[str, str]
) -> None:
    assert split_ref_and_path(blob(ref_and_path), names) == expected


@pytest.mark.parametrize(
    ("ambiguous", "expected"),
    [(False, ("feature", "with-slash/a.md")), (True, ("feature/with-slash", "a.md"))],
)
def test_a_first_segment_that_is_a_ref_wins_only_without_ambiguous_refs(
    ambiguous: bool, expected: tuple[str, str]
) -> None:
    names = {"feature", "feature/with-slash"}
    assert split_ref_and_path(blob("feature/with-slash/a.md"), names, ambiguous_refs=ambiguous) == expected


def test_a_ref_that_leaves_no_path_is_a_url_without_a_file() -> None:
    with pytest.raises(InvalidReference, match="no file path found after the ref"):
        split_ref_and_path(blob("my-topic/with-slash"), {"my-topic/with-slash"})


# -- fetching ref names ----------------------------------------------------------------------


@pytest.fixture
async def session() -> AsyncIterator[tuple[GitLabClient, respx.MockRouter]]:
    with respx.mock(base_url="https://gitlab.example.com", assert_all_called=False) as router:
        async with httpx.AsyncClient() as http:
            client = GitLabClient(GitLabSettings(url="https://gitlab.example.com"), http=http)
            yield client, router


async def test_names_are_paged_and_cached(session: tuple[GitLabClient, respx.MockRouter]) -> None:
    client, router = session
    branch_pages = [
        [f"feature/b{i}" for i in range(REF_PAGE_SIZE)],
        ["feature", "feature/with-slash"],
    ]

    def branches(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        page = body["variables"]["offset"] // REF_PAGE_SIZE
        names = branch_pages[page] if page < len(branch_pages) else []
        return httpx.Response(200, json={"data": {"project": {"repository": {"branchNames": names}}}})

    graphql = router.post("/api/graphql").mock(side_effect=branches)
    tag_pages = {
        "1": [{"name": f"feature-{i}"} for i in range(TAG_PAGE_SIZE)],
        "2": [{"name": "feature/with"}],
    }
    tags = router.get("/api/v4/projects/g%2Fp/repository/tags").mock(
        side_effect=lambda r: httpx.Response(200, json=tag_pages.get(r.url.params["page"], []))
    )
    caches = CacheRegistry(enabled=True, max_entries=16)
    gitlab = client.session(Credential("PRIVATE-TOKEN", "t1"))
    url = blob("feature/with-slash/app/x.rb")
    for _ in range(2):
        got = await resolve_url_ref(gitlab, caches, refs_ttl_seconds=30, blob_url=url)
        # Branches and tags, and `feature/with-slash` starts with `feature/`: ambiguous refs, so
        # the longest ref wins (GitLab's has_ambiguous_refs?).
        assert got == ("feature/with-slash", "app/x.rb", ("feature",))
    assert graphql.call_count == 2 and tags.call_count == 2  # two pages each, then cached
    other = client.session(Credential("PRIVATE-TOKEN", "t2"))
    await resolve_url_ref(other, caches, refs_ttl_seconds=30, blob_url=url)
    assert graphql.call_count == 4  # another credential: its own lookup


async def test_paging_stops_at_the_cap(session: tuple[GitLabClient, respx.MockRouter]) -> None:
    client, router = session
    full = {"data": {"project": {"repository": {"branchNames": ["x/y"] * REF_PAGE_SIZE}}}}
    graphql = router.post("/api/graphql").respond(200, json=full)
    url = BlobUrl(url="u", project_path="g/p", ref_and_path="x/y/z", view="blob", ref_type="heads")
    got = await resolve_url_ref(
        client.session(Credential("PRIVATE-TOKEN", "t")),
        CacheRegistry(enabled=True, max_entries=4),
        refs_ttl_seconds=30,
        blob_url=url,
    )
    assert got[:2] == ("x/y", "z")
    assert graphql.call_count == MAX_REF_PAGES


@pytest.mark.parametrize(("tags", "expected"), [([], "feature"), ([{"name": "v1.0"}], "feature/with-slash")])
async def test_with_ref_type_heads_one_tag_name_decides_ambiguity(
    session: tuple[GitLabClient, respx.MockRouter], tags: list[dict[str, str]], expected: str
) -> None:
    client, router = session
    names = {"data": {"project": {"repository": {"branchNames": ["feature", "feature/with-slash"]}}}}
    graphql = router.post("/api/graphql").respond(200, json=names)
    tag_route = router.get("/api/v4/projects/g%2Fp/repository/tags").respond(200, json=tags)
    url = BlobUrl(
        url="u", project_path="g/p", ref_and_path="feature/with-slash/a.md", view="blob", ref_type="heads"
    )
    caches = CacheRegistry(enabled=True, max_entries=8)
    gitlab = client.session(Credential("PRIVATE-TOKEN", "t"))
    for _ in range(2):
        got = await resolve_url_ref(gitlab, caches, refs_ttl_seconds=30, blob_url=url)
        assert got.ref == expected
    assert graphql.call_count == 1 and tag_route.call_count == 1  # then cached
    assert dict(tag_route.calls[0].request.url.params) == {"per_page": "1"}
