"""Placeholder until the transport lands."""

from __future__ import annotations

from aiohttp import web


def setup(app: web.Application) -> None:
    """Add the ``/mcp`` routes to ``app``."""
