"""Part of a file GitLab serves whole, asked for with HTTP ``Range`` (RFC 9110 §14), and bounded
when the range is not honoured.

GitLab's archive download (``GET /projects/:id/jobs/:job_id/artifacts``) is served by Workhorse:
from disk through ``X-Sendfile``, answered with Go's ``http.ServeContent``, which honours ``Range``
(``workhorse/internal/sendfile/sendfile.go``); from object storage through ``send-url``, which
forwards ``Range`` and the conditional headers and relays the store's ``206``
(``workhorse/internal/sendurl/sendurl.go``); or, with object storage's direct download, by a
redirect to a signed URL (``present_carrierwave_file!`` in ``lib/api/helpers.rb``), which the
gateway does not follow (it sends requests to the configured GitLab only; see
:class:`~gateway.gitlab.errors.GitLabUpstreamError` with a 3xx ``status``). A proxy in front of
GitLab may still drop the header and send the whole file: the answer then has no
``Content-Range``, and :func:`read_range` reads no more than ``max_bytes`` of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.gitlab.errors import GitLabUpstreamError

if TYPE_CHECKING:
    from gateway.gitlab.client import GitLabSession

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RangeRead:
    """What one ranged GET brought.

    Attributes:
        start: the offset in the file of ``content``'s first byte.
        content: the bytes read (at most ``max_bytes``).
        total: the whole file's size, when the answer said (``Content-Range``, or the
            ``Content-Length`` of a whole-file answer); else None.
        honoured: True for a ``206`` (``Content-Range`` present): the bytes asked for.
        cut: True when the answer held more than ``max_bytes`` and was not read past them
            (for a whole-file answer whose ``Content-Length`` says so, nothing was read).
    """

    start: int
    content: bytes
    total: int | None
    honoured: bool
    cut: bool


async def read_range(
    gitlab: GitLabSession,
    route: str,
    *,
    path_params: Mapping[str, str | int],
    first: int | None = None,
    last: int | None = None,
    suffix: int | None = None,
    max_bytes: int,
) -> RangeRead:
    """GET ``route`` with ``Range: bytes=first-last`` (or ``bytes=-suffix``, the file's last bytes).

    Raises:
        ValueError: neither or both of a ``first``/``last`` pair and ``suffix`` (a programming error).
        GitLabUpstreamError: a ``Content-Range`` that is not the one asked for; and the typed
            errors of :meth:`GitLabClient.stream` (a redirect is an upstream error with its 3xx
            ``status``).
    """
    if suffix is not None and first is None and last is None:
        spec = f"bytes=-{suffix}"
    elif suffix is None and first is not None and last is not None and 0 <= first <= last:
        spec = f"bytes={first}-{last}"
    else:
        raise ValueError("give first and last (first <= last), or suffix")
    # identity: a range counts bytes of the representation sent, so it must not be compressed.
    headers = {"Range": spec, "Accept-Encoding": "identity"}
    async with gitlab.stream(route, path_params=path_params, headers=headers) as body:
        content_range = body.headers.get("content-range")
        if content_range:
            match = _CONTENT_RANGE.fullmatch(content_range.strip())
            if match is None or (first is not None and int(match[1]) != first):
                raise GitLabUpstreamError(
                    f"GitLab answered a ranged read of {route} with Content-Range {content_range!r}, "
                    f"not the range asked for ({spec}).",
                    request_id=gitlab.request_id,
                )
            start, end = int(match[1]), int(match[2])
            total = int(match[3]) if match[3] != "*" else None
            expected: int | None = end - start + 1
            honoured = True
        else:  # Range ignored: the whole file, from its first byte
            start, total, honoured = 0, body.content_length, False
            expected = total
            if total is not None and total > max_bytes:
                return RangeRead(start=0, content=b"", total=total, honoured=False, cut=True)
        buffer = bytearray()
        cut = False
        async for chunk in body.chunks():
            room = max_bytes - len(buffer)
            if len(chunk) > room:
                buffer += chunk[:room]
                cut = True
                break
            buffer += chunk
        if expected is not None and len(buffer) < min(expected, max_bytes):
            raise GitLabUpstreamError(
                f"GitLab's answer to a ranged read of {route} ended after {len(buffer)} of the "
                f"{expected} bytes it announced; try again later.",
                request_id=gitlab.request_id,
            )
    return RangeRead(start=start, content=bytes(buffer), total=total, honoured=honoured, cut=cut)
