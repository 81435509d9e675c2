"""Whether a ref a caller named is a branch or tag of the project, and, when it is not, the
project's nearest branch and tag names: the hint ``list_pipelines`` gives with an empty page for
an unknown ``ref``, and ``list_repository_tree`` with a ref GitLab does not know.

Asked only on those paths, over REST (https://docs.gitlab.com/api/branches/,
https://docs.gitlab.com/api/tags/): the first :data:`NAMES_PAGE` branch and tag names (two
requests), and, when a list is longer than that and the ref is not in it, the exact lookup of the
ref as a branch and as a tag. The nearest names are the same name in another case, then difflib's
closest (ratio 0.6 or more), at most :data:`NEAREST`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gateway.gitlab.errors import GitLabError, GitLabNotFound
from gateway.gitlab.urls import encode_project
from gateway.tools.context import ToolContext

NAMES_PAGE = 100
NEAREST = 5
_SHA = re.compile(r"[0-9a-fA-F]{7,64}")


@dataclass(frozen=True, slots=True)
class RefCheck:
    """``exists``: a branch or tag of that name (None: not known, GitLab failed); ``nearest``: the
    closest branch and tag names when it does not exist."""

    exists: bool | None
    nearest: tuple[str, ...] = ()

    def hint(self, ref: str, *, takes_sha: bool = False) -> str:
        """A sentence for the caller ("" when the ref exists or nothing is known); ``takes_sha``: the
        ref may name a commit too (a tree's), not only a branch or tag (a pipeline's)."""
        if self.exists is not False:
            return ""
        names = ", ".join(f"'{n}'" for n in self.nearest)
        nearest = f" Nearest branch and tag names: {names}." if names else ""
        if takes_sha:
            return (
                f"'{ref}' is no branch, tag or commit SHA of the project (refs are case-sensitive).{nearest}"
            )
        return (
            f"'{ref}' is no branch or tag of the project (refs are case-sensitive; a pipeline's ref is a "
            f"branch or tag name, not a commit SHA or a merge request).{nearest}"
        )


async def _names(ctx: ToolContext, project: str, kind: str) -> list[str]:
    answer = await ctx.gitlab.rest(
        "GET",
        f"/projects/{{id}}/repository/{kind}",
        path_params={"id": encode_project(project)},
        params={"per_page": NAMES_PAGE},
    )
    return (
        [n["name"] for n in answer if isinstance(n, dict) and isinstance(n.get("name"), str)]
        if isinstance(answer, list)
        else []
    )


async def _one(ctx: ToolContext, project: str, kind: str, ref: str) -> bool:
    try:
        answer: Any = await ctx.gitlab.rest(
            "GET",
            f"/projects/{{id}}/repository/{kind}/{{name}}",
            path_params={"id": encode_project(project), "name": quote(ref, safe="")},
        )
    except (GitLabNotFound, ValueError):  # ValueError: `.` or `..`, which no ref is named
        return False
    return isinstance(answer, dict)


def nearest(ref: str, names: list[str]) -> tuple[str, ...]:
    """Up to :data:`NEAREST` of ``names`` closest to ``ref`` (the same name in another case first)."""
    same = [n for n in names if n.lower() == ref.lower() and n != ref]
    close = difflib.get_close_matches(ref, names, n=NEAREST, cutoff=0.6)
    return tuple(dict.fromkeys(same + close))[:NEAREST]


async def check_ref(ctx: ToolContext, project: str, ref: str) -> RefCheck:
    """Whether ``ref`` is a branch or tag of ``project`` (a commit SHA counts as existing: it is not
    checked), and the nearest names when not. GitLab failing leaves it unknown, never an error:
    the hint is a courtesy beside the caller's own answer."""
    if _SHA.fullmatch(ref) or ref == "HEAD":
        return RefCheck(True)
    try:
        branches = await _names(ctx, project, "branches")
        tags = await _names(ctx, project, "tags")
        names = branches + tags
        if (
            ref in names
            or ref.removeprefix("refs/heads/") in branches
            or ref.removeprefix("refs/tags/") in tags
        ):
            return RefCheck(True)
        if len(branches) >= NAMES_PAGE and await _one(ctx, project, "branches", ref):
            return RefCheck(True)
        if len(tags) >= NAMES_PAGE and await _one(ctx, project, "tags", ref):
            return RefCheck(True)
    except GitLabError:
        return RefCheck(None)
    return RefCheck(False, nearest(ref, names))
