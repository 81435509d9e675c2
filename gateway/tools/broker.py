"""Placeholder: tools of this module are not written yet."""

from __future__ import annotations

from gateway.tools.registry import Tool

TOOLS: list[Tool] = []
