"""REST routes as the client sends them: a template (``/projects/{id}/repository/tags``, also the
metrics label, so logs and metrics never carry a raw path) filled with path parameters that must
each already be one encoded segment (:func:`gateway.gitlab.urls.encode_project`,
``urllib.parse.quote(value, safe="")``), so no caller's value can change the route.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gateway.gitlab.urls import EncodedId

#: One encoded path segment: RFC 3986 ``pchar`` without ``/``, and no dot segment.
_SEGMENT = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@%]+")


def rest_path(route: str, path_params: Mapping[str, str | int] | None, suffix: str = "") -> str:
    """``route`` filled with ``path_params``, then ``suffix`` (encoded segments joined by ``/``, a
    wildcard route's tail such as an artifact's path) appended.

    Raises:
        ValueError: a path parameter or a suffix segment is not one encoded segment (a programming
            error: the value would change the route).
    """
    path = route.format(**{k: _segment(k, v) for k, v in (path_params or {}).items()})
    if suffix:
        path += "/".join(_segment("suffix", s) for s in suffix.split("/"))
    return path


def _segment(name: str, value: str | int) -> str:
    """``value`` as one REST path segment; refuses anything that would change the route."""
    if isinstance(value, bool):
        raise ValueError(f"path parameter {name!r} must be a string or an integer, not a bool")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, EncodedId):
        return str(value)
    if not _SEGMENT.fullmatch(value) or value in (".", ".."):
        raise ValueError(
            f"path parameter {name!r} is not one encoded path segment: {value!r}; encode it with "
            "gateway.gitlab.urls.encode_project or urllib.parse.quote(value, safe='')"
        )
    return value
