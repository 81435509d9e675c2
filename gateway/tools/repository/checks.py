"""Checks on a read before anything is returned: the project a url named, Duo context exclusion
rules, and the errors for a missing ref or file (GitLab's texts)."""

from __future__ import annotations

from functools import lru_cache

import pathspec

from gateway.errors import ToolError, bad_request
from gateway.tools.repository.target import FileTarget


def check_project(target: FileTarget, project_id: int) -> None:
    if target.expected_project_id is not None and target.expected_project_id != project_id:
        raise bad_request(
            f"Project mismatch: project_id is '{target.expected_project_id}' but url contains "
            f"'{target.project.shown}' (project ID {project_id})",
            field="project_id",
        )


@lru_cache(maxsize=256)
def _exclusion_spec(rules: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(rules)


def is_excluded(rules: tuple[str, ...], path: str) -> bool:
    """True when ``path`` matches the project's Duo context exclusion ``rules``.

    Rules are gitignore-style globs, ``!`` re-including (GitLab ``Ai::FileExclusionService``;
    ``projectSettingsUpdate(duoContextExclusionSettings: {exclusionRules: ["test", "!includetest"]})``),
    matched with pathspec's ``GitIgnoreSpec``. No rules: nothing is excluded.

    Raises:
        ToolError: ``unauthorized`` when a rule cannot be parsed: the file is refused rather than
            possibly leaking what the project meant to exclude.
    """
    if not rules:
        return False
    try:
        spec = _exclusion_spec(rules)
    except (ValueError, TypeError) as err:
        raise ToolError(
            "unauthorized",
            f"File '{path}' cannot be read: this project's Duo context exclusion rules could not be applied "
            f"({err}), so the gateway refuses rather than risk returning an excluded file.",
            kind="excluded",
            path=path,
        ) from None
    return bool(spec.match_file(path))


def check_excluded(target: FileTarget, rules: tuple[str, ...]) -> None:
    if is_excluded(rules, target.path):
        raise ToolError(
            "unauthorized",
            f"File '{target.path}' is excluded from AI context by this project's settings and cannot be "
            "read.",
            kind="excluded",
            path=target.path,
        )
