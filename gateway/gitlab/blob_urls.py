"""GitLab file URLs: ``<base>/<project>/-/(blob|raw|blame)/<ref>/<path>`` → project, ref and path.

Rules (GitLab's own URL parsing, gitlabhq
``app/services/mcp/tools/concerns/url_parser.rb`` and ``lib/extracts_ref/ref_extractor.rb``):

- Only ``http``/``https`` URLs on the configured GitLab are accepted: host, port and sub-path
  (``relative_url_root``) must match :class:`~gateway.gitlab.urls.GitLabBase`. Anything else is a
  :class:`InvalidReference` raised before any request, so a caller can never make the gateway send its
  token elsewhere.
- ``BLOB_URL_PATTERN = <project_path>/-/(blob|raw|blame)/<id>``: the project path runs to the
  first ``/-/``; ``id`` (ref and path) is percent-decoded once. ``?ref_type=heads|tags`` is read
  from the query string. A ``#L10`` / ``#L10-20`` fragment (GitLab's line anchors) is kept so the
  tool can open the window there.
- Branch names may contain ``/``, so ``id`` is split like GitLab's web UI
  (``ExtractsRef::RefExtractor#extract_ref``): a full commit SHA as the first segment is the ref;
  otherwise, when the first segment is itself a branch or tag it wins (``use_first_path_segment?``)
  unless the repository has ambiguous refs (``Repository#has_ambiguous_refs?``: it has both
  branches and tags, and some ref name with a slash starts with a slash-free ref name + ``/``);
  otherwise the longest branch or tag name that prefixes ``id``; otherwise the first segment
  (GitLab's "try our best"; the read then reports the ref as not found). Ref names are fetched only
  when ``id`` can be split more than one way, narrowed to names starting with the first segment,
  and cached per credential and project for ``cache.refs_ttl_seconds``. Branch names come from
  GraphQL ``Repository.branchNames``; GraphQL has no tag-name list, so tag names come from REST
  ``GET /projects/:id/repository/tags?search=^``. Only when the first segment is a ref and a longer
  ref also prefixes ``id`` does the answer depend on ambiguity; a longer name ``<first>/…`` already
  makes the refs ambiguous if the repository has both kinds, so at most one more request (one name
  of the kind the narrowed lists did not show) settles it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple
from urllib.parse import parse_qs, unquote

from gateway.gitlab.errors import InvalidReference
from gateway.gitlab.operation import GraphQLData, Operation
from gateway.gitlab.urls import GitLabBase, encode_project, not_a, parse_gitlab_url

if TYPE_CHECKING:
    from gateway.cache import CacheRegistry
    from gateway.gitlab.client import GitLabSession

RefType = Literal["heads", "tags"]

#: A full commit SHA: SHA-1 (40 hex digits) or SHA-256 (64). Short SHAs are not immutable names.
FULL_SHA = re.compile(r"[0-9a-fA-F]{40}(?:[0-9a-fA-F]{24})?")

_VIEWS = ("blob", "raw", "blame")
_BLOB_PAGE = re.compile(r"(?P<view>blob|raw|blame)/(?P<id>.*)", re.DOTALL)
#: A directory page (``/-/tree/<ref>/<dir>``): refused with its own message, since agents paste them.
_TREE_PAGE = re.compile(r"tree(?:/.*)?", re.DOTALL)
_LINE_ANCHOR = re.compile(r"L(?P<start>[1-9]\d*)(?:-L?(?P<end>[1-9]\d*))?")
#: Characters git forbids in ref names (``git check-ref-format``) that are also glob syntax.
_NOT_IN_REFS = re.compile(r"[*?\[\\\s~^:]")

#: Ref names fetched per page and pages at most, per kind, when a URL is ambiguous.
REF_PAGE_SIZE = 1000
TAG_PAGE_SIZE = 100
MAX_REF_PAGES = 10


class _Repository(GraphQLData):
    branchNames: list[Any] | None = None


class _Project(GraphQLData):
    repository: _Repository | None = None


class BranchNamesAnswer(GraphQLData):
    project: _Project | None = None


BRANCH_NAMES = Operation("get_repository_file_branch_names", BranchNamesAnswer)


@dataclass(frozen=True)
class BlobUrl:
    """A parsed GitLab file URL.

    Attributes:
        url: the URL as given (for messages).
        project_path: the project's full path, e.g. ``group/sub/project``.
        ref_and_path: GitLab's ``id``: ``<ref>/<path>``, percent-decoded once.
        view: ``blob``, ``raw`` or ``blame``.
        ref_type: ``heads`` or ``tags`` from ``?ref_type=``, or None.
        lines: ``(first, last)`` 1-based from a ``#L<first>[-<last>]`` anchor (``last`` None for
            a single-line anchor), or None.
    """

    url: str
    project_path: str
    ref_and_path: str
    view: str
    ref_type: RefType | None = None
    lines: tuple[int, int | None] | None = None

    @property
    def segments(self) -> list[str]:
        """``ref_and_path`` split on ``/``."""
        return self.ref_and_path.split("/")


def is_full_sha(ref: str) -> bool:
    """True for a full 40- or 64-digit hexadecimal commit SHA (the only immutable refs)."""
    return FULL_SHA.fullmatch(ref) is not None


def parse_blob_url(url: str, base: GitLabBase) -> BlobUrl:
    """Parse a GitLab blob, raw or blame URL on the configured GitLab.

    Args:
        url: e.g. ``https://gitlab.example.com/group/project/-/blob/main/app/x.rb?ref_type=heads#L3-9``.
        base: the configured GitLab.

    Raises:
        InvalidReference: as :func:`~gateway.gitlab.urls.parse_gitlab_url`, or a ``/-/tree/``
            (directory) URL or otherwise not a ``/-/blob|raw|blame/`` URL, no file path after the
            ref, percent-escapes that are not UTF-8, or an unknown ``ref_type``.
    """
    example = f"{base.url}/<group>/<project>/-/blob/<ref>/<path>"
    parsed = parse_gitlab_url(base, url, example=example)
    match = _BLOB_PAGE.fullmatch(parsed.page)
    if match is None and _TREE_PAGE.fullmatch(parsed.page):
        raise InvalidReference(
            f"The URL {url!r} is a directory (/-/tree/) URL, and a file is read one at a time: list the "
            f"directory with list_repository_tree (it takes this URL), then give the URL or path of a "
            f"file in it ({example})."
        )
    if match is None:
        raise not_a("file (blob, raw or blame)", parsed, example)
    try:
        ref_and_path = unquote(match["id"], errors="strict")
    except UnicodeDecodeError:
        raise InvalidReference(f"The URL {url!r} has percent-escapes that are not valid UTF-8.") from None
    if "\x00" in ref_and_path:
        raise InvalidReference(f"The URL {url!r} contains a NUL character.")
    ref, _, file_path = ref_and_path.partition("/")
    if not ref or not file_path:
        # GitLab's own wording (get_repository_file_tool.rb, resolve_ref_and_path).
        raise InvalidReference(f"Invalid file URL: no file path found after the ref in {url}")
    return BlobUrl(
        url=url,
        project_path=parsed.project,
        ref_and_path=ref_and_path,
        view=match["view"],
        ref_type=_ref_type(parsed.query, url),
        lines=_line_anchor(parsed.fragment),
    )


#: What a tree URL's ``<ref>/<folder>`` is given as for the ref split (:func:`parse_tree_url`): a
#: last segment that no ref name has, so that the split leaves a path even when the URL names a
#: ref alone (``/-/tree/feature/x``); the folder is what precedes it.
TREE_END = "."


@dataclass(frozen=True)
class TreeUrl:
    """A project page or a ``/-/tree/<ref>[/<folder>]`` page on the configured GitLab.

    Attributes:
        project_path: the project's full path.
        ref_and_folder: a :class:`BlobUrl` whose path is the folder followed by :data:`TREE_END`
            (split like a file URL's, :func:`resolve_url_ref`); None for the project page (the
            default branch, the root).
    """

    project_path: str
    ref_and_folder: BlobUrl | None


def parse_tree_url(url: str, base: GitLabBase) -> TreeUrl:
    """Parse a project URL or a folder (``/-/tree/``) URL on the configured GitLab.

    Raises:
        InvalidReference: as :func:`~gateway.gitlab.urls.parse_gitlab_url`, or another page of
            the project (a file URL names a file, not a folder), or percent-escapes not UTF-8.
    """
    example = f"{base.url}/<group>/<project>/-/tree/<ref>/<folder> (or the project's URL)"
    parsed = parse_gitlab_url(base, url, example=example)
    page = parsed.page.strip("/")
    if not page:
        return TreeUrl(parsed.project, None)
    if not _TREE_PAGE.fullmatch(page):
        if _BLOB_PAGE.fullmatch(page):
            raise InvalidReference(
                f"The URL {url!r} is a file URL, not a folder's: read the file with get_repository_file "
                f"(it takes this URL), or give its folder's URL ({example})."
            )
        raise not_a("folder (/-/tree/)", parsed, example)
    try:
        ref_and_folder = unquote(page.removeprefix("tree").strip("/"), errors="strict")
    except UnicodeDecodeError:
        raise InvalidReference(f"The URL {url!r} has percent-escapes that are not valid UTF-8.") from None
    if "\x00" in ref_and_folder:
        raise InvalidReference(f"The URL {url!r} contains a NUL character.")
    if not ref_and_folder:
        return TreeUrl(parsed.project, None)
    split = BlobUrl(
        url=url,
        project_path=parsed.project,
        ref_and_path=f"{ref_and_folder}/{TREE_END}",
        view="tree",
        ref_type=_ref_type(parsed.query, url),
    )
    return TreeUrl(parsed.project, split)


def _ref_type(query: str, url: str) -> RefType | None:
    values = parse_qs(query).get("ref_type", [])
    if not values or values[-1] == "":
        return None
    value = values[-1].lower()
    if value == "heads":
        return "heads"
    if value == "tags":
        return "tags"
    raise InvalidReference(
        f"The URL {url!r} has ref_type={values[-1]!r}; GitLab accepts ref_type=heads or ref_type=tags."
    )


def _line_anchor(fragment: str) -> tuple[int, int | None] | None:
    match = _LINE_ANCHOR.fullmatch(fragment)
    if match is None:
        return None
    start = int(match["start"])
    end = int(match["end"]) if match["end"] else None
    if end is not None and end < start:
        start, end = end, start
    return start, end


def needs_ref_names(blob_url: BlobUrl) -> bool:
    """True when ``ref_and_path`` can be split into (ref, path) more than one way.

    Not ambiguous: a full SHA or ``HEAD`` as the first segment, only two segments (the path must
    not be empty), or a first segment that cannot be a ref name (so no name can start with it).
    """
    segments = blob_url.segments
    first = segments[0]
    if len(segments) <= 2 or is_full_sha(first) or first == "HEAD":
        return False
    return _NOT_IN_REFS.search(first) is None and first not in ("", ".", "..")


class RefSplit(NamedTuple):
    """A blob URL's ``(ref, path)``, and the other ref names that could have been its ref."""

    ref: str
    path: str
    #: Other branch or tag names that prefix the URL's ``<ref>/<path>``, longest first (known only
    #: when ref names were fetched), for a message when the read fails.
    others: tuple[str, ...] = ()


def prefixing_refs(blob_url: BlobUrl, ref_names: Collection[str]) -> list[str]:
    """The names in ``ref_names`` that prefix ``ref_and_path`` at a segment boundary, longest first."""
    ref_and_path = blob_url.ref_and_path
    with_slash = ref_and_path if ref_and_path.endswith("/") else ref_and_path + "/"
    return sorted((n for n in ref_names if with_slash.startswith(n + "/")), key=lambda n: (-len(n), n))


def split_ref_and_path(
    blob_url: BlobUrl, ref_names: Collection[str] | None, *, ambiguous_refs: bool = False
) -> tuple[str, str]:
    """Split ``ref_and_path`` the way GitLab's web UI does.

    Args:
        blob_url: the parsed URL.
        ref_names: branch and/or tag names of the project that may prefix ``ref_and_path``
            (at least every name starting with the first segment), or None when
            :func:`needs_ref_names` said none were needed.
        ambiguous_refs: the repository has ambiguous refs (``Repository#has_ambiguous_refs?``),
            so a first segment that is a ref does not win over a longer ref.

    Returns:
        ``(ref, path)``; ``path`` is not empty.

    Raises:
        InvalidReference: when the longest matching ref leaves no file path (the URL
            names a ref, not a file: GitLab's "no file path found after the ref").
    """
    ref_and_path = blob_url.ref_and_path
    first, rest = ref_and_path.split("/", 1)
    if not ref_names or (first in ref_names and not ambiguous_refs):
        return first, rest
    matching = prefixing_refs(blob_url, ref_names)
    if not matching:
        return first, rest
    best = matching[0]
    path = ref_and_path[len(best) + 1 :]
    if not path:
        raise InvalidReference(f"Invalid file URL: no file path found after the ref in {blob_url.url}")
    return best, path


async def resolve_url_ref(
    session: GitLabSession,
    caches: CacheRegistry,
    *,
    refs_ttl_seconds: float,
    blob_url: BlobUrl,
) -> RefSplit:
    """``(ref, path)`` of a blob URL, fetching ref names only when the split is ambiguous.

    Names are fetched concurrently (branches by GraphQL, tags by REST, or just the kind named by
    ``?ref_type=``), narrowed to names starting with the first segment, and cached under
    ``(credential cache key, project, kind, first segment)`` in the ``refs`` cache. When the first
    segment is a ref and a longer ref prefixes the URL too, whether the repository has both
    branches and tags decides (GitLab's ``has_ambiguous_refs?``); a kind the narrowed lists did not
    show is looked up with one name (cached under ``(credential, project, "exists", kind)``).

    Raises:
        InvalidReference: see :func:`split_ref_and_path`.
        GitLabError: a ref-name lookup failed (not found when the project is not visible).
    """
    if not needs_ref_names(blob_url):
        return RefSplit(*split_ref_and_path(blob_url, None))
    first = blob_url.segments[0]
    cache = caches.get("refs", ttl=refs_ttl_seconds)
    project_key = blob_url.project_path.lower()
    cred = session.credential.cache_key
    kinds: tuple[RefType, ...] = (blob_url.ref_type,) if blob_url.ref_type else ("heads", "tags")

    def load(kind: RefType) -> Callable[[], Awaitable[frozenset[str]]]:
        if kind == "heads":
            return lambda: _branch_names(session, blob_url.project_path, first)
        return lambda: _tag_names(session, blob_url.project_path, first)

    found = await asyncio.gather(
        *(cache.get_or_load((cred, project_key, kind, first), load(kind)) for kind in kinds)
    )
    names: set[str] = set().union(*found)
    matching = prefixing_refs(blob_url, names)
    ambiguous = False
    if first in names and len(matching) > 1:
        # `first` has no slash and a longer `first/…` name exists: the refs are ambiguous exactly
        # when the repository has both branches and tags.
        shown = dict(zip(kinds, found, strict=True))

        async def has(kind: RefType) -> bool:
            if shown.get(kind):
                return True
            key = (cred, project_key, "exists", kind)
            return bool(await cache.get_or_load(key, lambda: _one_name(session, blob_url.project_path, kind)))

        ambiguous = all(await asyncio.gather(has("heads"), has("tags")))
    ref, path = split_ref_and_path(blob_url, names, ambiguous_refs=ambiguous)
    return RefSplit(ref, path, tuple(n for n in matching if n != ref))


async def _one_name(session: GitLabSession, project_path: str, kind: RefType) -> frozenset[str]:
    """At most one branch (or tag) name of the project: does it have any?"""
    if kind == "heads":
        answer = await BRANCH_NAMES.run(
            session, {"fullPath": project_path, "searchPattern": "*", "offset": 0, "limit": 1}
        )
        repository = answer.project.repository if answer.project else None
        batch: Any = (repository.branchNames if repository else None) or []
    else:
        batch = await session.rest(
            "GET",
            "/projects/{id}/repository/tags",
            path_params={"id": encode_project(project_path)},
            params={"per_page": 1},
        )
    if not isinstance(batch, list):
        return frozenset()
    names = (item.get("name") if isinstance(item, dict) else item for item in batch)
    return frozenset(name for name in names if isinstance(name, str))


async def _branch_names(session: GitLabSession, project_path: str, first: str) -> frozenset[str]:
    """Branch names equal to ``first`` or starting with it (``branchNames`` takes a glob)."""
    names: set[str] = set()
    for page in range(MAX_REF_PAGES):
        answer = await BRANCH_NAMES.run(
            session,
            {
                "fullPath": project_path,
                "searchPattern": f"{first}*",
                "offset": page * REF_PAGE_SIZE,
                "limit": REF_PAGE_SIZE,
            },
        )
        repository = answer.project.repository if answer.project else None
        batch = (repository.branchNames if repository else None) or []
        names.update(name for name in batch if isinstance(name, str))
        if len(batch) < REF_PAGE_SIZE:
            break
    return frozenset(names)


async def _tag_names(session: GitLabSession, project_path: str, first: str) -> frozenset[str]:
    """Tag names starting with ``first`` (REST ``search=^prefix``; GraphQL lists no tag names)."""
    names: set[str] = set()
    for page in range(1, MAX_REF_PAGES + 1):
        batch = await session.rest(
            "GET",
            "/projects/{id}/repository/tags",
            path_params={"id": encode_project(project_path)},
            params={"search": f"^{first}", "per_page": TAG_PAGE_SIZE, "page": page},
        )
        if not isinstance(batch, list):
            break
        names.update(t["name"] for t in batch if isinstance(t, dict) and isinstance(t.get("name"), str))
        if len(batch) < TAG_PAGE_SIZE:
            break
    return frozenset(names)
