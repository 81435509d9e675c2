"""Connect to the gateway as a client of MCP 2025-11-25 does, with the official MCP Python SDK.

Clients of the handshake era (2025-11-25, 2025-06-18, 2025-03-26) send `initialize` first and
then carry the `Mcp-Session-Id` the gateway answered on every request. The SDK speaks that era
when asked with `mode="legacy"` (its default, "auto", speaks 2026-07-28 to this gateway: see
mcp_client.py). The gateway serves both eras on the same URL.

pip install mcp==2.3.0
python docs/examples/mcp_client_legacy.py [http://127.0.0.1:8080/mcp]
"""

import asyncio
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str) -> None:
    # X-Agent-Id names the agent to the broker tools (a loopback gateway without client tokens);
    # with client tokens send {"Authorization": "Bearer <token>"} instead, and in passthrough
    # mode add {"PRIVATE-TOKEN": "<your GitLab token>"}. No read timeout: waits may be long.
    headers = {"X-Agent-Id": "dev"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=None)) as http,
        # mode="legacy": initialize, then a session, as a 2025-11-25 client.
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        print("protocol version:", client.protocol_version)
        listed = await client.list_tools()
        print(len(listed.tools), "tools:", ", ".join(tool.name for tool in listed.tools))
        result = await client.call_tool("get_pipeline_status", {})
        if result.is_error:
            print("error:", result.structured_content["error"])
        else:
            print("broker state:", result.structured_content["state"])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"))
