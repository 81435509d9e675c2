"""Connect to the gateway with the official MCP Python SDK, as the broker's `dev` agent.

pip install mcp==2.3.0
python docs/examples/mcp_client.py [http://127.0.0.1:8080/mcp]
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
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        listed = await client.list_tools()
        print(len(listed.tools), "tools:", ", ".join(tool.name for tool in listed.tools))
        result = await client.call_tool("get_pipeline_status", {})
        if result.is_error:
            print("error:", result.structured_content["error"])
        else:
            print("broker state:", result.structured_content["state"])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp"))
