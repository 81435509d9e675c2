"""A minimal Streamable HTTP MCP client for the benchmarks: JSON-RPC POSTs in either protocol era
(``legacy``: one 2025-11-25 session; ``modern``: stateless 2026-07-28 requests with per-request
``_meta`` and the ``Mcp-Method``/``Mcp-Name`` headers).

The benchmarks use it instead of the SDK client so that the figures measure the gateway, not the
client's machinery.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.e2e.rpc import initialize_request

PROTOCOL = "2025-11-25"
MODERN = "2026-07-28"


class McpCaller:
    """A minimal Streamable HTTP MCP client: one session, ``tools/call`` as JSON-RPC POSTs."""

    def __init__(
        self, http: httpx.AsyncClient, url: str, client_name: str = "bench", era: str = "legacy"
    ) -> None:
        self.http = http
        self.url = url
        self.client_name = client_name
        self.era = era
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if era == "modern":
            self.headers["MCP-Protocol-Version"] = MODERN
        self.meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": client_name, "version": "1"},
        }
        self.next_id = 0

    async def _post(self, message: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
        response = await self.http.post(
            self.url, content=json.dumps(message), headers={**self.headers, **(headers or {})}
        )
        response.raise_for_status()
        return response

    @staticmethod
    def _result(response: httpx.Response) -> dict[str, Any]:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            for line in response.text.splitlines():
                if line.startswith("data:"):
                    message = json.loads(line[5:])
                    if "result" in message or "error" in message:
                        return message  # type: ignore[no-any-return]
            raise RuntimeError("SSE response without a result")
        return response.json()  # type: ignore[no-any-return]

    async def initialize(self) -> None:
        """Open the session (legacy era); nothing to do in the stateless era."""
        if self.era == "modern":
            return
        response = await self._post(initialize_request(self.client_name, PROTOCOL))
        self._result(response)
        session = response.headers.get("mcp-session-id")
        if session:
            self.headers["Mcp-Session-Id"] = session
        self.headers["MCP-Protocol-Version"] = PROTOCOL
        await self.http.post(
            self.url,
            content=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            headers=self.headers,
        )

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        headers: dict[str, str] = {}
        if self.era == "modern":
            params["_meta"] = self.meta
            headers = {"Mcp-Method": "tools/call", "Mcp-Name": name}
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": params}
        result = self._result(await self._post(message, headers))
        if "error" in result or result["result"].get("isError"):
            raise RuntimeError(f"tools/call failed: {json.dumps(result)[:500]}")
        return result["result"]  # type: ignore[no-any-return]
