"""The MCP protocol core: JSON-RPC messages in, protocol replies out, for both eras; no transport
(``server`` answers, ``tool_calls`` runs ``tools/call``, ``calls`` keeps calls in flight)."""
