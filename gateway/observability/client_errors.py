"""Malformed HTTP from a client is the client's fault, not the server's: one INFO line, no traceback.

aiohttp's server logs every request it cannot parse (a header without a colon, a NUL in a header
name, a request line too long...) as "Error handling request" at ERROR with the parser's
traceback, while it answers the client 400. Anyone who can reach the port could then fill the
error log and page an operator. :class:`MalformedRequestFilter`, on the ``aiohttp.server``
logger, turns exactly those records into one INFO line with the parser's reason; errors of the
gateway's own handlers stay ERROR with their traceback.
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

from gateway.observability.log_text import safe_text

#: Longest parser reason kept (it may quote the offending bytes).
REASON_LIMIT = 200


class MalformedRequestFilter(logging.Filter):
    """Rewrites aiohttp's records about unparseable requests (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        if not logging.getLogger().isEnabledFor(logging.INFO):
            return False
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else None
        reason = exc.message if isinstance(exc.message, str) and exc.message else type(exc).__name__
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg = "malformed HTTP request from %s refused with %s: %s"
        record.args = (remote, exc.code or 400, safe_text(reason, limit=REASON_LIMIT))
        record.exc_info = None
        record.exc_text = None
        return True


def install() -> None:
    """Attach the filter to ``aiohttp.server`` once (idempotent)."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, MalformedRequestFilter) for f in logger.filters):
        logger.addFilter(MalformedRequestFilter())
