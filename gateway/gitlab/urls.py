"""GitLab URLs: the base URL's normal form, and project / file identifiers encoded exactly once.

GitLab may live under a sub-path (``https://host/gitlab``, its ``relative_url_root``); users
paste the base with a trailing ``/`` or ``/api/v4``. REST takes a project as a numeric id or the
URL-encoded full path (``group%2Fproject``, GitLab REST docs "Namespaced paths"), and a file path
fully encoded (``/`` → ``%2F``, repository files API).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from gitlab.utils import EncodedId

from gateway.errors import bad_request

_API_SUFFIX = re.compile(r"(/api/v4)+/?$")


@dataclass(frozen=True)
class GitLabBase:
    """A normalised GitLab base URL.

    Attributes:
        url: ``scheme://host[:port][/sub/path]``, no trailing slash, no ``/api/v4``.
        origin: ``scheme://host[:port]``.
        sub_path: ``/sub/path`` or ``""``.
    """

    url: str
    origin: str
    sub_path: str

    @property
    def api_url(self) -> str:
        """REST root, ``<url>/api/v4``."""
        return f"{self.url}/api/v4"

    @property
    def graphql_url(self) -> str:
        """GraphQL endpoint, ``<url>/api/graphql``."""
        return f"{self.url}/api/graphql"

    @property
    def host(self) -> str:
        """``host[:port]`` as in the URL (lowercased)."""
        return urlsplit(self.url).netloc.lower()

    def web_url(self, path: str) -> str:
        """An absolute web URL for a GitLab ``path``/``webPath`` field.

        GitLab's path fields already carry the relative URL root when one is configured; a path
        that does not is joined under the sub-path, so the root is never doubled or dropped.
        """
        if not path.startswith("/"):
            path = "/" + path
        if self.sub_path and (path == self.sub_path or path.startswith(self.sub_path + "/")):
            return self.origin + path
        return self.url + path


def normalize_base_url(url: str) -> GitLabBase:
    """Normalise a configured GitLab URL.

    ``https://h/gitlab/``, ``https://h/gitlab/api/v4`` and ``https://h/gitlab`` all give
    ``GitLabBase(url="https://h/gitlab", origin="https://h", sub_path="/gitlab")``.

    Raises:
        ValueError: not an http(s) URL with a host, or it carries a query or fragment.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"GitLab URL {url!r} must be http(s)://host[/sub/path]")
    if parts.query or parts.fragment:
        raise ValueError(f"GitLab URL {url!r} must not carry a query string or fragment")
    path = _API_SUFFIX.sub("", parts.path.rstrip("/")).rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc.lower()}"
    return GitLabBase(url=origin + path, origin=origin, sub_path=path)


def project_full_path(project: str) -> str:
    """A project identifier as GraphQL's ``fullPath`` wants it: decoded, no slashes at the ends.

    Accepts ``group/sub/project`` and the already-encoded ``group%2Fsub%2Fproject``.

    Raises:
        ToolError: ``bad_request`` for an empty path or one with ``..`` segments.
    """
    path = unquote(project.strip()).strip("/")
    if not path:
        raise bad_request("The project must be a numeric ID or a full path such as `group/project`.")
    if any(seg in ("", ".", "..") for seg in path.split("/")):
        raise bad_request(f"Project path {project!r} has empty, `.` or `..` segments; give the full path, e.g. `group/project`.")
    return path


def encode_project(project: str | int) -> str:
    """A project id or path as one REST path segment, encoded exactly once.

    ``12`` → ``12``; ``grp/sub/proj`` and ``grp%2Fsub%2Fproj`` → ``grp%2Fsub%2Fproj``.
    """
    if isinstance(project, int) or str(project).strip().isdigit():
        return str(int(project))
    return str(EncodedId(project_full_path(str(project))))


def encode_segment(value: str) -> str:
    """Percent-encode ``value`` as one path segment (``/`` included), once."""
    return quote(value, safe="")
