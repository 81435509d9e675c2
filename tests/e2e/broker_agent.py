"""A broker agent over raw HTTP for the broker's end-to-end tests and benchmarks: one MCP session,
whose calls any connection can carry (a test chooses: one pool, or a fresh connection per wait).

No SDK: the crash, acknowledgement and disconnect tests need to control connections themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from tests.e2e.rpc import ACCEPT, PROTOCOL, initialize_request


class BrokerAgent:
    """One MCP session of broker agent ``agent`` (sent as ``X-Agent-Id``)."""

    def __init__(self, url: str, agent: str, client_name: str = "broker-agent") -> None:
        self.url = url
        self.client_name = client_name
        self.headers = {"X-Agent-Id": agent, "Accept": ACCEPT, "Content-Type": "application/json"}
        self.next_id = 0

    async def open(self, http: httpx.AsyncClient) -> BrokerAgent:
        """Initialize the session through ``http``."""
        init = initialize_request(self.client_name, PROTOCOL)
        answer = await http.post(self.url, json=init, headers=self.headers)
        answer.raise_for_status()
        if "mcp-session-id" in answer.headers:
            self.headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = PROTOCOL
        await http.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers
        )
        return self

    async def call(
        self,
        http: httpx.AsyncClient,
        tool: str,
        arguments: dict[str, Any],
        on_result: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """One tools/call; its ``structuredContent``.

        An SSE answer is read event by event, as MCP clients do: the result counts as soon as its
        event arrived (``on_result`` is called then), even if the stream breaks after it (a kill,
        or a wait abandoned while its response is being closed).

        Raises:
            RuntimeError: no result, or a result with ``isError``.
        """
        self.next_id += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        body: Any = None
        try:
            async with http.stream("POST", self.url, json=message, headers=self.headers) as answer:
                answer.raise_for_status()
                if not answer.headers.get("content-type", "").startswith("text/event-stream"):
                    body = json.loads(await answer.aread())
                else:
                    async for line in answer.aiter_lines():
                        if line.startswith("data:") and line[5:].strip().startswith("{"):
                            candidate = json.loads(line[5:])
                            if "result" in candidate or "error" in candidate:
                                body = candidate
                                if on_result is not None and "result" in body:
                                    on_result(body["result"].get("structuredContent") or {})
                                break
        except httpx.TransportError:
            if body is None:
                raise
        if body is None or "result" not in body or body["result"].get("isError"):
            raise RuntimeError(f"{tool}: {str(body)[:300]}")
        return dict(body["result"]["structuredContent"])
