"""Plain-HTTP MCP for black-box tests: JSON-RPC POSTs on one keep-alive connection, no SDK.

The fault, fuzz, crash and soak tests speak to the gateway this way so that they pin what goes
over the wire (status codes, bodies, headers) and keep working whatever the gateway's MCP layer is
built on.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.local_http import TLS

PROTOCOL = "2025-06-18"
ACCEPT = "application/json, text/event-stream"


def initialize_request(client_name: str, protocol: str = PROTOCOL) -> dict[str, Any]:
    """The JSON-RPC ``initialize`` request a legacy-era client opens its session with."""
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": protocol,
            "capabilities": {},
            "clientInfo": {"name": client_name, "version": "1"},
        },
    }


def decode(response: httpx.Response) -> Any:
    """The JSON-RPC message of an answer (JSON, or the last message of an SSE stream)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        found: Any = None
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip().startswith("{"):
                message = json.loads(line[5:])
                if isinstance(message, dict) and ("result" in message or "error" in message):
                    found = message
        return found
    return response.json()


class Rpc:
    """One MCP session over one ``httpx.Client`` (one keep-alive connection when used serially).

    Args:
        url: the gateway's ``/mcp`` URL.
        headers: sent with every request (``X-Agent-Id``, ``PRIVATE-TOKEN``...).
        timeout: seconds per request.
    """

    def __init__(self, url: str, *, headers: dict[str, str] | None = None, timeout: float = 60.0) -> None:
        self.url = url
        self.http = httpx.Client(timeout=timeout, trust_env=False, verify=TLS)
        self.headers = {"Accept": ACCEPT, "Content-Type": "application/json", **(headers or {})}
        self.next_id = 0

    def __enter__(self) -> Rpc:
        self.initialize()
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def post(self, content: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
        """A raw POST to ``/mcp`` with the session's headers (``headers`` override them)."""
        return self.http.post(self.url, content=content, headers={**self.headers, **(headers or {})})

    def initialize(self) -> None:
        answer = self.post(json.dumps(initialize_request("black-box", PROTOCOL)))
        answer.raise_for_status()
        if "mcp-session-id" in answer.headers:
            self.headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = PROTOCOL
        self.post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def request(self, method: str, params: Any = None) -> Any:
        """One JSON-RPC request; its decoded answer (``{"result": ...}`` or ``{"error": ...}``)."""
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        answer = self.post(json.dumps(message))
        assert answer.status_code != 500, answer.text[:500]
        return decode(answer)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``tools/call``: the ``CallToolResult`` (``isError`` results included).

        Raises:
            AssertionError: the answer was a JSON-RPC error.
        """
        answer = self.request("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in answer, answer
        return dict(answer["result"])

    def ping(self) -> bool:
        return "result" in (self.request("ping") or {})


def structured(result: dict[str, Any]) -> dict[str, Any]:
    return dict(result.get("structuredContent") or {})


def error_reason(result: dict[str, Any]) -> str | None:
    """The error reason of an ``isError`` result, None for a success."""
    if not result.get("isError"):
        return None
    return str(structured(result).get("error", {}).get("reason"))


def metric_samples(base_url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` as ``{(sample name, sorted labels): value}``."""
    text = httpx.get(f"{base_url}/metrics", timeout=10, trust_env=False).text
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def metric(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))
