"""Reading a console form: a body aiohttp's parser cannot read is the client's mistake, answered
400 with one INFO line (as on ``/mcp``), never a 500 with a trace."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web
from multidict import MultiDictProxy

log = logging.getLogger("gateway.console")


async def read_form(
    request: web.Request, headers: Mapping[str, str]
) -> MultiDictProxy[str | bytes | bytearray | web.FileField]:
    """The request's form (``request.post()``).

    Args:
        request: a POST to the console.
        headers: the console's security headers, set on the 400 too.

    Raises:
        web.HTTPBadRequest: the body is not a form that can be read: a character encoding it is
            not in, an unknown charset, a broken multipart body (boundary, part headers, nesting).
        web.HTTPRequestEntityTooLarge: larger than ``server.max_request_bytes``.
    """
    try:
        return await request.post()
    except web.HTTPException:
        raise
    except ConnectionError:
        raise  # the client went away while sending: nobody to answer
    except Exception as err:
        # UnicodeDecodeError, LookupError (charset), ValueError and RuntimeError (multipart),
        # aiohttp's HttpProcessingError (a part's headers): whatever the parser chokes on.
        log.info(
            "console request refused: %s %s from %s: its body could not be read as a form (%s: %s)",
            request.method,
            request.path,
            request.remote,
            type(err).__name__,
            str(err)[:120],
        )
        raise web.HTTPBadRequest(
            text="Bad request: the form could not be read (send it as "
            "application/x-www-form-urlencoded or multipart/form-data, in UTF-8).",
            headers={**headers, "Cache-Control": "no-store"},
        ) from None
