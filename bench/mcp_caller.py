"""A minimal Streamable HTTP MCP client for the benchmarks: one session, JSON-RPC POSTs.

The benchmarks use it instead of the SDK client so that the figures measure the gateway, not the
client's machinery.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

PROTOCOL = "2025-11-25"


class McpCaller:
    """A minimal Streamable HTTP MCP client: one session, ``tools/call`` as JSON-RPC POSTs."""

    def __init__(self, http: httpx.AsyncClient, url: str, client_name: str = "bench") -> None:
        self.http = http
        self.url = url
        self.client_name = client_name
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        self.next_id = 0

    async def _post(self, message: dict[str, Any]) -> httpx.Response:
        response = await self.http.post(self.url, content=json.dumps(message), headers=self.headers)
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
        response = await self._post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": self.client_name, "version": "1"},
                },
            }
        )
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
        message = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        result = self._result(await self._post(message))
        if "error" in result or result["result"].get("isError"):
            raise RuntimeError(f"tools/call failed: {json.dumps(result)[:500]}")
        return result["result"]  # type: ignore[no-any-return]
