"""The MCP layer, in two layers that point one way.

- :mod:`gateway.mcp.protocol`: the protocol core. A parsed JSON-RPC message and a request context
  (the caller, the era, cancellation, where notifications go) in; protocol replies out. It knows
  no HTTP: no status, no header, no aiohttp.
- :mod:`gateway.mcp.http`: the Streamable HTTP transport over it: the ``/mcp`` endpoint, its
  middlewares, authentication, sealed sessions, Origin/Host checks, JSON and SSE framing, the
  one table from protocol errors to HTTP statuses, and the settling of delivered results.
"""
