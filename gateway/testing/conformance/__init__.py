"""``--conformance-fixtures`` (``server.conformance_fixtures``, loopback only): what the MCP
conformance suite needs of a server besides the gateway's own tools. ``fixtures``: its fixture
tools (ordinary tools, registered in that mode) and its two extra methods; ``tasks``: the fixture
tools of its tasks-* scenarios. Shipped in the wheel (the conformance test runs the installed
gateway in this mode); imported only when the mode is on.
"""
