"""GitLab identifiers: the base URL's normal form, project and file paths encoded exactly once,
pipeline web URLs, and GraphQL global IDs.

- GitLab may live under a sub-path (``https://host/gitlab``, its ``relative_url_root``); users
  paste the base with a trailing ``/``, ``/api/v4`` or ``/api/graphql``
  (README, "Point it at your GitLab").
- REST takes a project as a numeric id or the URL-encoded full path (``group%2Fproject``, GitLab
  REST docs "Namespaced path encoding"), and a file path fully encoded (``/`` → ``%2F``, repository
  files API). GraphQL takes the *decoded* full path (``Query.project(fullPath: ID!)``). Callers
  may send either form; :func:`project_full_path` decodes exactly once and :func:`encode_project`
  encodes exactly once (:class:`EncodedId`), so ``grp/sub/proj`` and ``grp%2Fsub%2Fproj``
  reach GitLab identically.
- A ``url`` argument is followed only when its host and sub-path are the configured GitLab's
  (a token is never sent elsewhere); anything else is ``bad_request`` before any request.
- GraphQL ids are global IDs, ``gid://gitlab/<Model>/<id>``; tools show their integer tail
  (https://docs.gitlab.com/api/graphql/reference/#globalid).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from gateway.gitlab.errors import InvalidReference

_API_SUFFIX = re.compile(r"(?:/api/(?:v4|graphql))+/?$")
#: One namespace or project path segment (GitLab ``Gitlab::PathRegex``: ASCII letters, digits,
#: ``_``, ``.``, ``-``; not starting with ``-``).
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")
_DIGITS = re.compile(r"[0-9]+")
_PIPELINE_PAGE = re.compile(r"pipelines/(?P<id>[0-9]+)(?:/.*)?", re.DOTALL)
#: Largest id GitLab stores (bigint); larger numbers are caller mistakes, not ids.
MAX_ID = 2**63 - 1
_DEFAULT_PORTS = {"http": 80, "https": 443}


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

    @functools.cached_property
    def _host_port(self) -> tuple[str, int]:
        # Split once per base, not per URL checked (a frozen dataclass keeps its __dict__, which
        # is where cached_property stores the value).
        ours = urlsplit(self.url)
        return (ours.hostname or "").lower(), ours.port or _DEFAULT_PORTS[ours.scheme]

    def web_url(self, path: str) -> str:
        """An absolute web URL for a GitLab ``path``/``webPath`` field.

        GitLab's path fields already carry the relative URL root when one is configured
        (``/gitlab/group/project/-/pipelines/1``); a path that does not is joined under the
        sub-path, so the root is never doubled or dropped.
        """
        if not path.startswith("/"):
            path = "/" + path
        if self.sub_path and (path == self.sub_path or path.startswith(self.sub_path + "/")):
            return self.origin + path
        return self.url + path

    def same_instance(self, url: str) -> str | None:
        """The path of ``url`` below this GitLab's sub-path, or None when ``url`` is elsewhere.

        Same instance means an http(s) URL with the same host and port (default ports count as
        given) whose path starts with the sub-path. The returned path starts with ``/``; its
        query and fragment are dropped.

        A URL whose authority holds ``@`` (userinfo, ``https://x:y@host/``) or ``\\`` is never
        the same instance: browsers (WHATWG URL standard) read ``\\`` as ``/``, so
        ``https://evil.com\\@gitlab.example.com/`` is evil.com to them while Python's
        ``urlsplit`` names gitlab.example.com; refusing both keeps the two readings from differing.
        """
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        if "@" in parts.netloc or "\\" in parts.netloc:
            return None
        try:
            port = parts.port
        except ValueError:  # a port that is not a number
            return None
        our_host, our_port = self._host_port
        if parts.hostname.lower() != our_host or (port or _DEFAULT_PORTS[parts.scheme]) != our_port:
            return None
        path = parts.path
        if self.sub_path:
            if not path.startswith(self.sub_path + "/"):
                return None
            path = path[len(self.sub_path) :]
        return path


def normalize_base_url(url: str) -> GitLabBase:
    """Normalise a configured GitLab URL.

    ``https://h/gitlab/``, ``https://h/gitlab/api/v4`` and ``https://h/gitlab`` all give
    ``GitLabBase(url="https://h/gitlab", origin="https://h", sub_path="/gitlab")``.

    Raises:
        ValueError: not an http(s) URL with a host, or it carries credentials, a query or a
            fragment, or a port that is not 1 to 65535.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"GitLab URL {url!r} must be http(s)://host[:port][/sub/path]")
    if parts.username is not None or parts.password is not None:
        raise ValueError("the GitLab URL must not carry credentials; set GITLAB_TOKEN instead")
    if parts.query or parts.fragment:
        raise ValueError(f"GitLab URL {url!r} must not carry a query string or fragment")
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        port = 0
    if port == 0:
        raise ValueError(f"GitLab URL {url!r} has no usable port: give a number from 1 to 65535, or none")
    path = _API_SUFFIX.sub("", parts.path.rstrip("/")).rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc.lower()}"
    return GitLabBase(url=origin + path, origin=origin, sub_path=path)


def is_numeric_id(project: str | int) -> bool:
    """True for a project given as its numeric ID (``42`` or ``"42"``), False for a path."""
    if isinstance(project, bool):
        return False
    if isinstance(project, int):
        return True
    return _DIGITS.fullmatch(project.strip()) is not None


def project_full_path(project: str) -> str:
    """A project path as GraphQL's ``fullPath`` wants it: decoded once, no slashes at the ends.

    Accepts ``group/sub/project`` and the already-encoded ``group%2Fsub%2Fproject``; both give
    ``group/sub/project``.

    Raises:
        InvalidReference: for an empty path, a path without its namespace,
            ``.``/``..``/empty segments, characters GitLab does not allow in paths, or a path that
            was encoded twice.
    """
    path = unquote(project.strip()).strip("/")
    if not path:
        raise InvalidReference("The project must be a numeric ID or a full path such as `group/project`.")
    if "://" in path:
        raise InvalidReference(
            f"Project {project!r} is a URL; give the project's full path (the part after the host, e.g. "
            "`group/subgroup/project`) or its numeric ID."
        )
    if "%" in path:
        raise InvalidReference(
            f"Project path {project!r} looks URL-encoded twice; send it plain (`group/project`) or encoded "
            "once (`group%2Fproject`)."
        )
    segments = path.split("/")
    if any(seg in ("", ".", "..") for seg in segments):
        raise InvalidReference(
            f"Project path {project!r} has empty, `.` or `..` segments; give the numeric project ID or the "
            "full path, e.g. `group/subgroup/project`."
        )
    if len(segments) < 2:
        raise InvalidReference(
            f"Project path {project!r} lacks its namespace: give the full path, e.g. `group/project`, or "
            "the numeric project ID."
        )
    if not all(_PATH_SEGMENT.fullmatch(seg) for seg in segments):
        raise InvalidReference(
            f"Project path {project!r} is not a GitLab path: paths use letters, digits, `_`, `.` and `-` "
            "separated by `/`. Give the numeric project ID or the full path, e.g. `group/subgroup/project`."
        )
    return path


class EncodedId(str):
    """A REST path segment already URL-encoded (``/`` → ``%2F``; GitLab REST docs "Namespaced
    path encoding"); wrapping one again leaves it as is.

    python-gitlab has the same class in ``gitlab.utils``, but importing it loads python-gitlab
    and ``requests``: about 6 MiB of resident memory the gateway otherwise never uses.
    """

    __slots__ = ()

    def __new__(cls, value: str | int) -> EncodedId:
        if isinstance(value, EncodedId):
            return value
        return super().__new__(cls, quote(value, safe="") if isinstance(value, str) else str(value))


def encode_project(project: str | int) -> str:
    """A project id or path as one REST path segment, encoded exactly once.

    ``12`` → ``12``; ``grp/sub/proj`` and ``grp%2Fsub%2Fproj`` → ``grp%2Fsub%2Fproj``. The result
    is an :class:`EncodedId`, which :meth:`GitLabClient.rest` trusts as encoded.

    Raises:
        InvalidReference: as :func:`project_full_path`, or a negative id.
    """
    if is_numeric_id(project):
        number = int(project)
        if not 0 < number <= MAX_ID:
            raise InvalidReference(f"Project ID {project!r} must be a positive integer.")
        return EncodedId(number)
    return EncodedId(project_full_path(str(project)))


@dataclass(frozen=True)
class GitLabUrl:
    """A web URL on the configured GitLab, read as GitLab's router reads it.

    Attributes:
        url: the URL as given (for messages).
        project: the project's full path, decoded once (``group/sub/project``).
        page: what follows the project's ``/-/``, e.g. ``pipelines/42`` or ``blob/main/a.py``;
            ``""`` for the project page itself.
        query: the query string, undecoded.
        fragment: the fragment (``L10-20`` line anchors), undecoded.
    """

    url: str
    project: str
    page: str
    query: str = ""
    fragment: str = ""


def parse_gitlab_url(base: GitLabBase, url: str, *, example: str) -> GitLabUrl:
    """Read a web URL of a project (or a page of it) on the configured GitLab.

    The one parser of every ``url`` argument, with one set of messages: http(s) only, no user
    name or password, host, port and sub-path of the configured GitLab
    (:meth:`GitLabBase.same_instance`), a project path before ``/-/`` (GitLab's
    ``UrlParser#parse_parent_url``), not a group page. ``example`` is the URL shape the caller
    should have given, quoted in every message.

    Raises:
        InvalidReference: as above, or a project path GitLab cannot have; no request is made.
    """
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise InvalidReference(
            f"The URL {url!r} is not on this gateway's GitLab: only its http(s) URLs are followed; give one "
            f"such as {example}."
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidReference(
            f"The URL {url!r} is not on this gateway's GitLab as written: it carries a user name or password "
            f"(`user@`), which the gateway never follows. Give the plain URL, such as {example}."
        )
    path = base.same_instance(url)
    if path is None:
        raise InvalidReference(
            f"The URL {url!r} is not on this gateway's GitLab ({base.url}), so nothing was fetched: host, "
            f"port and path must match. Give a URL on that GitLab, such as {example}."
        )
    path = path.lstrip("/")
    if path == "-" or path.startswith("-/"):
        project_part, page = "", path[2:]
    else:
        project_part, _, page = path.partition("/-/")
        project_part = project_part.rstrip("/").removesuffix("/-")
        if not page:
            # A clone URL (what `git remote get-url origin` prints) names the project too: GitLab
            # refuses paths ending in `.git`, so the suffix is never part of the project's path.
            project_part = project_part.removesuffix(".git")
    if not project_part.strip("/"):
        raise InvalidReference(f"The URL {url!r} names no project; give one such as {example}.")
    if project_part.startswith("groups/"):
        raise InvalidReference(
            f"The URL {url!r} is a group page, not a project's; give one such as {example}."
        )
    return GitLabUrl(url, project_full_path(project_part), page, parts.query, parts.fragment)


def not_a(kind: str, url: GitLabUrl, example: str) -> InvalidReference:
    """The error for a URL of this GitLab that is not a ``kind`` URL (one wording for every kind)."""
    return InvalidReference(f"The URL {url.url!r} is not a {kind} URL; expected {example}.")


@dataclass(frozen=True)
class PipelineRef:
    """A pipeline named by a web URL: the project's full path and the pipeline's global id."""

    project: str
    pipeline_id: int


def parse_pipeline_url(base: GitLabBase, url: str) -> PipelineRef:
    """Read ``<GitLab>/<project path>/-/pipelines/<id>`` (what GitLab shows in the browser).

    Raises:
        InvalidReference: as :func:`parse_gitlab_url`, or not a pipeline URL; no request is made.
    """
    example = f"{base.url}/<group>/<project>/-/pipelines/<id>"
    parsed = parse_gitlab_url(base, url, example=example)
    match = _PIPELINE_PAGE.fullmatch(parsed.page.rstrip("/"))
    if match is None:
        raise not_a("pipeline", parsed, example)
    pipeline_id = int(match["id"])
    if not 0 < pipeline_id <= MAX_ID:
        raise InvalidReference(f"The pipeline id in {url!r} must be a positive integer.")
    return PipelineRef(project=parsed.project, pipeline_id=pipeline_id)


def parse_project_url(base: GitLabBase, url: str) -> str:
    """The project full path of a project URL, or of any page of the project.

    Raises:
        InvalidReference: as :func:`parse_gitlab_url`.
    """
    return parse_gitlab_url(base, url, example=f"{base.url}/<group>/<project>").project


def global_id(model: str, number: int) -> str:
    """A GraphQL global ID, ``gid://gitlab/<model>/<number>`` (e.g. ``Ci::Pipeline``)."""
    return f"gid://gitlab/{model}/{number}"


def project_address(full_path: str | None, number: int | None) -> dict[str, Any]:
    """GraphQL variables naming one project in a document that reads it by path or by ID.

    ``Query.project`` takes only a full path, so a numeric ID goes through ``projects(ids:)``
    (``byId``) in the same document (``@skip``/``@include``); the skipped variable gets an inert
    value because both are declared non-null. Read the answer with
    :class:`~gateway.gitlab.operation.ByPathOrId`.
    """
    if number is not None:
        return {"byId": True, "fullPath": "", "projectIds": [global_id("Project", number)]}
    return {"byId": False, "fullPath": full_path or "", "projectIds": []}


def global_id_number(gid: object) -> int:
    """The integer tail of a GraphQL global ID (``gid://gitlab/Ci::Build/111`` → ``111``).

    Raises:
        ValueError: ``gid`` is not a global ID with a numeric tail (GitLab broke its own shape).
    """
    # On the hot path (every job of every page): a prefix check and a split, not a regex.
    if isinstance(gid, str) and gid.startswith("gid://gitlab/"):
        model, _, number = gid[13:].rpartition("/")
        if model and number.isascii() and number.isdigit():
            return int(number)
    raise ValueError(f"GitLab answered an id that is not a global ID: {gid!r}")


def global_id_number_or_none(gid: object) -> int | None:
    """:func:`global_id_number`, or None when ``gid`` is absent or not a global ID: for answers
    that fall back to an id the caller already gave (a mutation's pipeline, a workflow)."""
    try:
        return global_id_number(gid)
    except ValueError:
        return None


_JOB_PAGE = re.compile(
    r"jobs/(?P<id>[0-9]+)(?:/(?:raw|artifacts/(?:file|raw)/(?P<path>.+)|artifacts(?:/browse(?:/.*)?)?))?",
    re.DOTALL,
)


@dataclass(frozen=True)
class JobRef:
    """A job named by a web URL: the project's full path, the job's id and, for the URL of one
    artifact file (``.../-/jobs/<id>/artifacts/file/<path>``), that file's path (decoded once)."""

    project: str
    job_id: int
    artifact_path: str | None = None


def parse_job_url(base: GitLabBase, url: str) -> JobRef:
    """Read ``<GitLab>/<project path>/-/jobs/<id>`` (what GitLab shows in the browser), also with
    ``/raw``, ``/artifacts/browse/...`` or ``/artifacts/file/<path>`` after it.

    Raises:
        InvalidReference: as :func:`parse_gitlab_url`, or not a job URL; no request is made.
    """
    example = f"{base.url}/<group>/<project>/-/jobs/<id>"
    parsed = parse_gitlab_url(base, url, example=example)
    match = _JOB_PAGE.fullmatch(parsed.page.rstrip("/"))
    if match is None:
        raise not_a("job", parsed, example)
    job_id = int(match["id"])
    if not 0 < job_id <= MAX_ID:
        raise InvalidReference(f"The job id in {url!r} must be a positive integer.")
    path = match["path"]
    return JobRef(parsed.project, job_id, unquote(path) if path else None)
