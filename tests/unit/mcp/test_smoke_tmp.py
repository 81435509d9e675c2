from tests.unit.mcp.helpers import Mcp


async def test_smoke(mcp: Mcp) -> None:
    r = await mcp.rpc("ping")
    print(r)
    r = await mcp.rpc("tools/list")
    print([t["name"] for t in r["result"]["tools"]])
    r = await mcp.call("echo", {"text": "a", "times": 2})
    print(r)
    r = await mcp.call("wait", {"steps": 0})
