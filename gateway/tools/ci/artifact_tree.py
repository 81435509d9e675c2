"""GitLab's artifacts tree (``GET /projects/:id/jobs/:job_id/artifacts/tree``, GitLab 18.8 and
later, https://docs.gitlab.com/api/job_artifacts/#list-all-files-in-the-artifacts-archive), walked
one directory at a time.

GitLab documents ``recursive=true`` as listing every entry below ``path``, but answers it with the
entry's children (``Gitlab::Ci::Build::Artifacts::Metadata::Entry#children``): one level. So the
walk asks for one directory, keeps only its direct children (deeper entries, from a GitLab that
does what it documents, are skipped: each is read again from its own folder, never listed twice),
and goes into each subdirectory as it meets it. GitLab answers a directory's children sorted by
path, so a depth-first walk lists the whole archive sorted by path.

Where a walk stopped is a stack of :class:`Frame` (a directory, GitLab's page of it, the index in
that page), one per folder from the walk's start down; :func:`frames_position` writes it into the
listing's cursor and :func:`parse_frames` reads it back. A call reads at most
:data:`MAX_TREE_PAGES` of GitLab's pages; the walk then stops where it is and says where.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.gitlab.errors import GitLabNotFound, GitLabUpstreamError
from gateway.gitlab.urls import encode_project
from gateway.tools.ci.job_read import JobAnswer
from gateway.tools.context import ToolContext

log = logging.getLogger("gateway.tools.ci")

TREE_ROUTE = "/projects/{id}/jobs/{job_id}/artifacts/tree"
#: GitLab's largest page (``per_page``), and the most tree pages read for one call.
TREE_PAGE_SIZE = 100
MAX_TREE_PAGES = 10
#: The most of one tree page read (decoded): 100 entries are a few KB to a few hundred; a GitLab
#: or proxy that sends more (a compressed answer that decodes to millions of entries) gets an
#: upstream error naming the bound, not gigabytes of memory.
MAX_TREE_PAGE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Frame:
    """A directory being walked (``""`` for the archive's root, else ending in ``/``), GitLab's
    page of its entries and the index in that page the walk goes on from."""

    directory: str
    page: int = 1
    index: int = 0


def frames_position(frames: tuple[Frame, ...]) -> str:
    """``frames`` as text: each frame's ``page.index``, and the deepest directory when there is
    more than one (its ancestors are the others'; the first frame's is the listing's own)."""
    spots = "/".join(f"{f.page}.{f.index}" for f in frames)
    return f"{spots}:{frames[-1].directory}" if len(frames) > 1 else spots


def parse_frames(raw: str, base: str) -> tuple[Frame, ...]:
    """The frames :func:`frames_position` wrote, for a walk that started at ``base``.

    Raises:
        ValueError: ``raw`` is not such a position (or is one of another ``base``).
    """
    spots, _, deepest = raw.partition(":")
    pairs = [spot.split(".") for spot in spots.split("/")]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(raw)
    directories = [base]
    if len(pairs) > 1:
        names = deepest[len(base) :].removesuffix("/").split("/")
        if not deepest.startswith(base) or not deepest.endswith("/") or len(names) != len(pairs) - 1:
            raise ValueError(raw)
        directories += [base + "/".join(names[: n + 1]) + "/" for n in range(len(names))]
    elif deepest:
        raise ValueError(raw)
    frames = tuple(
        Frame(d, int(page), int(index)) for d, (page, index) in zip(directories, pairs, strict=True)
    )
    if any(f.page < 1 or f.index < 0 or "//" in f.directory for f in frames):
        raise ValueError(raw)
    return frames


@dataclass
class Walked:
    """What one call's walk read: the entries (``path``, whether a directory, size), and where to
    go on from (None once the walk is done)."""

    entries: list[tuple[str, bool, int | None]] = field(default_factory=list)
    next: tuple[Frame, ...] | None = None


def no_tree(ctx: ToolContext, err: GitLabNotFound) -> bool:
    """Whether a 404 from the tree route means "read the zip directory instead" (True), and, when
    it came from a GitLab without the route, record that for every later call.

    GitLab's tree says ``404 Artifacts metadata Not Found`` for an archive uploaded without
    metadata (this job only), ``404 Path Not Found`` and ``404 Artifacts Not Found`` for what is
    not there; an older GitLab's single-file route answers anything else (a file named ``tree``
    is missing from the archive).
    """
    said = err.message.lower()
    if "metadata" in said:
        return True
    if "path not found" in said or "artifacts not found" in said:
        return False
    if ctx.services.capabilities.artifacts_tree is not False:
        log.info(
            "GitLab has no artifacts tree API (it is older than 18.8): archives are listed with Range reads"
        )
    ctx.services.capabilities.artifacts_tree = False
    return True


async def _tree(ctx: ToolContext, project: str, job: JobAnswer, frame: Frame) -> list[Any]:
    params: dict[str, Any] = {"recursive": "true", "per_page": TREE_PAGE_SIZE, "page": frame.page}
    if frame.directory:
        params["path"] = frame.directory
    answer = await ctx.gitlab.rest(
        "GET",
        TREE_ROUTE,
        path_params={"id": encode_project(project), "job_id": job.id},
        params=params,
        max_bytes=MAX_TREE_PAGE_BYTES,
    )
    if not isinstance(answer, list):
        raise GitLabUpstreamError("GitLab's artifacts tree answered something other than a list of entries.")
    ctx.services.capabilities.artifacts_tree = True
    return answer


def _child(directory: str, item: Any) -> tuple[str, bool, int | None] | None:
    """``item`` as an entry when it is a direct child of ``directory``, else None."""
    path = item.get("path") if isinstance(item, dict) else None
    if not isinstance(path, str) or not path.startswith(directory):
        return None
    name = path[len(directory) :]
    if not name.strip("/") or "/" in name.removesuffix("/"):
        return None
    if item.get("type") == "directory" or path.endswith("/"):
        return (path if path.endswith("/") else f"{path}/", True, None)
    size = item.get("size")
    return (path, False, size if isinstance(size, int) else None)


async def walk(
    ctx: ToolContext,
    project: str,
    job: JobAnswer,
    frames: tuple[Frame, ...],
    match: Callable[[str], bool],
    first: int,
    *,
    descend: Callable[[str], bool],
) -> Walked:
    """Up to ``first`` entries ``match`` accepts, walking on from ``frames`` into the folders
    ``descend`` accepts, in at most :data:`MAX_TREE_PAGES` requests.

    Raises:
        GitLabNotFound: the walk's first directory answered 404 (a subdirectory's "Path Not
            Found" is an empty folder).
        GitLabError: GitLab failing.
    """
    out = Walked()
    stack = list(frames)
    read: dict[tuple[str, int], list[Any]] = {}
    requests = 0
    while stack:
        frame = stack[-1]
        items = read.get((frame.directory, frame.page))
        if items is None:
            if requests == MAX_TREE_PAGES:
                out.next = tuple(stack)  # pages left unread: the next call goes on from here
                return out
            requests += 1
            try:
                items = read[(frame.directory, frame.page)] = await _tree(ctx, project, job, frame)
            except GitLabNotFound as err:
                if len(stack) == 1 or "path not found" not in err.message.lower():
                    raise
                stack.pop()
                continue
        for index in range(frame.index, len(items)):
            child = _child(frame.directory, items[index])
            if child is None:
                continue
            if match(child[0]):
                if len(out.entries) == first:
                    stack[-1] = Frame(frame.directory, frame.page, index)
                    out.next = tuple(stack)
                    return out
                out.entries.append(child)
            if child[1] and descend(child[0]):
                stack[-1] = Frame(frame.directory, frame.page, index + 1)
                stack.append(Frame(child[0]))
                break
        else:
            if len(items) < TREE_PAGE_SIZE:
                stack.pop()
            else:
                stack[-1] = Frame(frame.directory, frame.page + 1)
    return out
