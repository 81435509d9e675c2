"""The phase broker's 18 tools: argument and result models (``models``) and the table (``tools``)."""

from gateway.tools.broker.tools import TOOLS

__all__ = ["TOOLS"]
