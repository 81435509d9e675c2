"""The files inside a job's artifacts archive, without downloading it: ``get_job``'s ``artifacts``
facet lists them, and ``get_artifact_file`` names the nearest ones when a path is missing.

Two ways, the first GitLab offers:

- **GitLab's artifacts tree** (``GET /projects/:id/jobs/:job_id/artifacts/tree``, GitLab 18.8 and
  later, https://docs.gitlab.com/api/job_artifacts/#list-all-files-in-the-artifacts-archive):
  read from the metadata GitLab wrote when the archive was uploaded, one directory at a time
  (:mod:`gateway.tools.ci.artifact_tree`: GitLab's ``recursive=true`` lists one level). An older
  GitLab routes that path to the single-file download, which answers 404 for a file named
  ``tree``: the first such answer makes the gateway use the second way for the rest of its life
  (:class:`~gateway.gitlab.capabilities.Capabilities`); a job whose archive has no metadata
  (GitLab says so) uses it for that job only.
- **The archive's zip directory**, read with HTTP ``Range`` on the archive download
  (:mod:`gateway.tools.ci.artifact_directory`).

Both ways answer alike: sorted by path, with an entry for every folder (``logs/``), paged with
``first`` and an opaque ``after`` cursor that says which way it came from and where it stopped. A
call reads at most :data:`~gateway.tools.ci.artifact_tree.MAX_TREE_PAGES` of GitLab's tree
pages: a page cut there has fewer than ``first`` entries, ``has_next_page`` and no ``total``, and
the next call goes on. A filter is a glob (``*`` matches across ``/``) or, without ``*``, ``?``
or ``[``, a path prefix; a prefix that names a folder (``logs/``) lists what is under it, not the
folder itself (as the tree answers its ``path``), and the tree is walked only on a prefix's way.
``get_job``'s listing and ``get_artifact_file``'s nearest paths are read by the same code
(:func:`list_files` and :func:`file_paths`).

An archive GitLab no longer has (expired, or erased: 404) is a listing that says so, never a
failed call: the job's own fields stay the answer.
"""

from __future__ import annotations

import asyncio
import difflib
import fnmatch
import heapq
import itertools
import logging
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from cachetools import LRUCache
from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import bad_request
from gateway.gitlab.errors import GitLabError, GitLabNotFound, GitLabUnauthorized
from gateway.tools.ci.artifact_directory import read_directory
from gateway.tools.ci.artifact_tree import Frame, frames_position, no_tree, parse_frames, walk
from gateway.tools.ci.job_read import JobAnswer
from gateway.tools.context import ToolContext
from gateway.tools.pagination import PageInfo, cursor_position, opaque_cursor

log = logging.getLogger("gateway.tools.ci")

#: The most paths read when a path is missing (files of its name are found among all of them),
#: the nearest ones named, and the bounds of the similarity (:func:`closest`): paths compared,
#: characters of each compared, and paths given difflib's quadratic ``ratio``. A crafted listing
#: of long, alike names took seconds of CPU before these bounds; now at most a few tenths.
MAX_SUGGESTION_PATHS = 20_000
NEAREST = 5
MAX_SIMILARITY_PATHS = 20_000
MAX_COMPARED_CHARS = 128
RATIO_CANDIDATES = 32

Source = Literal["tree", "archive_directory"]
_GLOB = frozenset("*?[")


class ArtifactEntry(BaseModel):
    # No docstring: it would be repeated in get_job's outputSchema.
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Path inside the archive, as get_artifact_file's `artifact_path` takes it.")
    type: Literal["file", "directory"]
    size: int | None = Field(description="Uncompressed size in bytes (null for a directory).")


class ArtifactFiles(BaseModel):
    # One page of the archive's entries (no docstring: see ArtifactEntry).
    model_config = ConfigDict(extra="forbid")

    entries: list[ArtifactEntry]
    page_info: PageInfo
    total: int | None = Field(description="Entries matching the filter in the whole archive, when known.")
    source: Source = Field(
        description="`tree`: GitLab's artifacts tree API; `archive_directory`: the archive's zip "
        "directory, read with HTTP Range (GitLab before 18.8)."
    )
    unavailable: str | None = Field(
        None, description="Why the entries could not be listed (then `entries` is empty)."
    )


# -- filter and cursor --------------------------------------------------------------------------


#: Compiled ``artifact_filter`` globs, the most recently used kept. Not ``fnmatch.fnmatchcase``:
#: it keeps every pattern it has seen in a process-wide cache of 32,768, and callers choose the
#: patterns (3,000 distinct filters held 23 MiB for the process's life).
GLOB_CACHE_SIZE = 256
_globs: LRUCache[str, re.Pattern[str]] = LRUCache(maxsize=GLOB_CACHE_SIZE)


def compiled_glob(pattern: str) -> re.Pattern[str]:
    """``pattern`` (an fnmatch glob, case-sensitive) as a regular expression, from a bounded cache."""
    found = _globs.get(pattern)
    if found is None:
        found = _globs[pattern] = re.compile(fnmatch.translate(pattern))
    return found


def matcher(pattern: str | None) -> Callable[[str], bool]:
    """A path test for ``pattern``: a glob when it has ``*``, ``?`` or ``[``, else a prefix; a
    prefix naming a folder (``logs/``) matches what is under it, not the folder itself."""
    if not pattern:
        return lambda _path: True
    if _GLOB & set(pattern):
        match = compiled_glob(pattern).match
        return lambda path: match(path) is not None
    return lambda path: path.startswith(pattern) and path != pattern


def _directory_of(pattern: str | None) -> str:
    """Where the tree walk starts: the directory a prefix names (``logs/``), else the root (``""``)."""
    if pattern and pattern.endswith("/") and not _GLOB & set(pattern) and pattern.strip("/"):
        return pattern.strip("/") + "/"
    return ""


def _may_hold(pattern: str | None) -> Callable[[str], bool]:
    """Whether a folder may hold paths ``pattern`` matches: for a prefix, only a folder on its way."""
    if not pattern or _GLOB & set(pattern):
        return lambda _folder: True
    return lambda folder: folder.startswith(pattern) or pattern.startswith(folder)


@dataclass(frozen=True, slots=True)
class Position:
    """Where a page stopped: the tree walk's frames (:mod:`~gateway.tools.ci.artifact_tree`), or
    the index in the zip directory."""

    source: Source
    frames: tuple[Frame, ...] = ()
    index: int = 0

    def cursor(self) -> str:
        return opaque_cursor(
            f"t{frames_position(self.frames)}" if self.source == "tree" else f"z{self.index}"
        )

    @classmethod
    def parse(cls, cursor: str, pattern: str | None) -> Position:
        """The position of an ``after`` this module handed out for ``pattern``; ``bad_request``
        for anything else."""
        try:
            raw = cursor_position(cursor)
            if raw.startswith("t"):
                return cls("tree", parse_frames(raw[1:], _directory_of(pattern)))
            if raw.startswith("z") and (index := int(raw[1:])) >= 0:
                return cls("archive_directory", index=index)
            raise ValueError(raw)
        except ValueError:
            raise bad_request(
                "`after` is not a cursor of this archive's listing: pass `artifact_files.page_info."
                'end_cursor` from the previous get_job call with include: ["artifacts"] and the same '
                "`artifact_filter`, unchanged.",
                invalid_arguments=["after"],
            ) from None


# -- listing --------------------------------------------------------------------------------------


@dataclass
class _Page:
    source: Source
    entries: list[dict[str, Any]] = field(default_factory=list)
    next: Position | None = None
    total: int | None = None
    unavailable: str | None = None

    def result(self) -> dict[str, Any]:
        info = PageInfo(
            has_next_page=self.next is not None, end_cursor=self.next.cursor() if self.next else None
        )
        out: dict[str, Any] = {
            "entries": self.entries,
            "page_info": info.model_dump(),
            "total": self.total,
            "source": self.source,
        }
        if self.unavailable:
            out["unavailable"] = self.unavailable
        return out


def _entry(path: str, is_dir: bool, size: int | None) -> dict[str, Any]:
    return {"path": path, "type": "directory" if is_dir else "file", "size": None if is_dir else size}


async def list_files(
    ctx: ToolContext, project: str, job: JobAnswer, *, pattern: str | None, first: int, after: str | None
) -> dict[str, Any]:
    """One page of the archive's entries matching ``pattern`` (an :class:`ArtifactFiles`).

    Raises:
        ToolError: ``bad_request`` for an ``after`` that is not this listing's cursor.
        GitLabError: GitLab failing (not a missing tree API, a missing archive, a refusal, nor a
            redirect or an ignored ``Range``: those are told in ``unavailable``).
    """
    position = Position.parse(after, pattern) if after else None
    return (await _page(ctx, project, job, pattern, first, position)).result()


async def _page(
    ctx: ToolContext, project: str, job: JobAnswer, pattern: str | None, first: int, position: Position | None
) -> _Page:
    """The one reading of a listing, whichever way GitLab offers (see the module)."""
    match = matcher(pattern)
    use_tree = (
        position.source == "tree" if position else ctx.services.capabilities.artifacts_tree is not False
    )
    try:
        if use_tree:
            page = await _tree_page(ctx, project, job, pattern, match, first, position)
            if page is not None:
                return page
            position, use_tree = None, False  # no tree here after all: the directory, from its start
        start = position.index if position else 0
        return await _directory_page(ctx, project, job, match, first, start)
    except GitLabUnauthorized as err:
        if err.status != 403:
            raise
        # The token read the job: this is the artifacts' own rule (`artifacts:access`).
        return _unavailable(
            use_tree,
            f"GitLab refused to list the artifacts of job {job.id} (403): the job may keep them for "
            "other roles (its `artifacts:access` setting), or the token may not read them.",
        )
    except GitLabNotFound as err:
        # The same token just read the job, so the 404 is the archive's: gone.
        return _unavailable(use_tree, _archive_gone(job, err))


def _unavailable(use_tree: bool, why: str) -> _Page:
    page = _Page("tree" if use_tree else "archive_directory")
    page.unavailable = why
    return page


def _archive_gone(job: JobAnswer, err: GitLabNotFound) -> str:
    """Why a job's archive GitLab answered 404 for cannot be listed."""
    if job.artifacts_expired:
        when = f"expired on {job.artifacts_expire_at} and were deleted"
    else:
        when = "are gone (erased, or expired and not yet marked so)"
    return (
        f"GitLab has no artifacts archive for job {job.id} to list (404: {err.message}): its artifacts "
        f"{when}. The job's own fields above are current; run the job again to produce the files anew."
    )


async def _tree_page(
    ctx: ToolContext,
    project: str,
    job: JobAnswer,
    pattern: str | None,
    match: Callable[[str], bool],
    first: int,
    position: Position | None,
) -> _Page | None:
    """A page from GitLab's tree, or None when this GitLab (or this job's archive) has none."""
    out = _Page("tree")
    frames = position.frames if position else (Frame(_directory_of(pattern)),)
    try:
        walked = await walk(ctx, project, job, frames, match, first, descend=_may_hold(pattern))
    except GitLabNotFound as err:
        if frames[0].directory and "path not found" in err.message.lower():
            out.total = 0
            return out  # no such directory in the archive: nothing matches
        if no_tree(ctx, err):
            return None
        out.unavailable = _archive_gone(job, err)
        return out
    out.entries = [_entry(*found) for found in walked.entries]
    if walked.next:
        out.next = Position("tree", walked.next)
    elif position is None:
        out.total = len(out.entries)
    return out


async def _directory_page(
    ctx: ToolContext, project: str, job: JobAnswer, match: Callable[[str], bool], first: int, start: int
) -> _Page:
    out = _Page("archive_directory")
    found, why = await read_directory(ctx, project, job)
    if found is None:
        out.unavailable = why
        return out
    matched = 0
    for index, entry in enumerate(found):
        if not match(entry.path):
            continue
        matched += 1
        if index < start:
            continue
        if len(out.entries) < first:
            out.entries.append(_entry(entry.path, entry.is_dir, entry.size))
        elif out.next is None:
            out.next = Position("archive_directory", index=index)
    out.total = matched
    return out


# -- the nearest paths ----------------------------------------------------------------------------


async def file_paths(ctx: ToolContext, project: str, job: JobAnswer) -> list[str]:
    """The archive's file paths, read as :func:`list_files` reads a listing: from the tree, what
    its first :data:`~gateway.tools.ci.artifact_tree.MAX_TREE_PAGES` pages hold; from the zip
    directory, the first :data:`MAX_SUGGESTION_PATHS`. Empty when the archive cannot be listed.

    Raises:
        GitLabError: GitLab failing.
    """
    page = await _page(ctx, project, job, None, MAX_SUGGESTION_PATHS, None)
    return [e["path"] for e in page.entries if e["type"] == "file"]


async def nearest_paths(ctx: ToolContext, project: str, job: JobAnswer, path: str) -> list[str]:
    """Up to :data:`NEAREST` file paths of the archive closest to ``path``: files of the same name
    first, then the most alike (:func:`closest`). Empty when the archive cannot be listed or
    GitLab fails (the caller's own error stays the answer).

    The comparison runs in a worker thread: even bounded, a listing of 20,000 paths costs a few
    tenths of a second of CPU, which the event loop's other requests should not wait for."""
    try:
        paths = await file_paths(ctx, project, job)
    except GitLabError:
        return []
    return await asyncio.to_thread(_nearest, path, paths)


def _nearest(path: str, paths: list[str]) -> list[str]:
    name = posixpath.basename(path)
    same_name = [p for p in paths if posixpath.basename(p) == name and p != path]
    return list(dict.fromkeys(same_name + closest(path, paths)))[:NEAREST]


def closest(path: str, paths: list[str], *, cutoff: float = 0.5) -> list[str]:
    """Up to :data:`NEAREST` of ``paths`` most alike ``path`` (difflib's ratio, ``cutoff`` or more),
    bounded in CPU whatever the names: only the first :data:`MAX_COMPARED_CHARS` characters of each
    are compared, only the first :data:`MAX_SIMILARITY_PATHS` paths, and difflib's quadratic
    ``ratio`` only for the :data:`RATIO_CANDIDATES` best by its linear ``quick_ratio`` (an upper
    bound of ``ratio``, the order ``difflib.get_close_matches`` filters in too)."""
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(path[:MAX_COMPARED_CHARS])
    rough: list[tuple[float, str]] = []
    for candidate in itertools.islice(paths, MAX_SIMILARITY_PATHS):
        matcher.set_seq1(candidate[:MAX_COMPARED_CHARS])
        if matcher.real_quick_ratio() >= cutoff and (quick := matcher.quick_ratio()) >= cutoff:
            rough.append((quick, candidate))
    scored: list[tuple[float, str]] = []
    for _, candidate in heapq.nlargest(RATIO_CANDIDATES, rough, key=lambda pair: pair[0]):
        matcher.set_seq1(candidate[:MAX_COMPARED_CHARS])
        if (ratio := matcher.ratio()) >= cutoff:
            scored.append((ratio, candidate))
    return [candidate for _, candidate in heapq.nlargest(NEAREST, scored, key=lambda pair: pair[0])]
