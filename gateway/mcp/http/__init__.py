"""The Streamable HTTP transport of the protocol core (``endpoint`` is the ``/mcp`` route)."""
