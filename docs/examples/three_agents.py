"""A scripted pm, dev and reviewer on the broker, to watch in the console at /broker.

Two phases of made-up issues. On the second issue the dev asks for a person (`request_human`);
the PM then waits for the person's instruction and calls `resume`. Answer it from the console
at /broker ("Send to the PM"; the console is on when the gateway has
GATEWAY_CONSOLE__OPERATOR_TOKEN, the token you sign in with), or, with no console, from a
shell as the gateway's user: gitlab-mcp-gateway broker instruct 'what the PM should do'.

pip install mcp==2.3.0
python docs/examples/three_agents.py [http://127.0.0.1:8080/mcp] [--pace SECONDS]

Agents name themselves with X-Agent-Id (a gateway on 127.0.0.1 without client tokens), or,
when the gateway has client tokens, with theirs: set GATEWAY_TOKEN_PM, GATEWAY_TOKEN_DEV and
GATEWAY_TOKEN_REVIEWER. Each token needs the broker toolset (with docs/examples/agents.toml,
give the reviewer's entry the broker toolset as its comment says: report_review is a broker
tool that changes state). The pipeline must be IDLE (a fresh one, or after "Start over").
"""

import argparse
import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


class Agent:
    def __init__(self, name: str, client: Client, pace: float) -> None:
        self.name, self.client, self.pace = name, client, pace

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args)
        data = result.structured_content or {}
        if result.is_error:
            raise SystemExit(f"{self.name}: {tool} failed: {data.get('error', {}).get('message', data)}")
        print(f"{self.name:>8}: {tool} {args if args else ''}")
        await asyncio.sleep(self.pace)
        return data

    async def receive(self, *subjects: str) -> dict[str, Any]:
        """The next message with one of ``subjects``, skipping others (the broker's notices)."""
        while True:
            got = await self.call("wait_for_message", wait_seconds=240)
            message = got.get("message")
            if got.get("stopped"):
                raise SystemExit(
                    f"{self.name}: the pipeline was stopped; start over in the console or with: broker reset"
                )
            if message is not None and message["subject"] in subjects:
                return dict(message)


@contextlib.asynccontextmanager
async def connect(url: str, name: str, pace: float) -> AsyncIterator[Agent]:
    token = os.environ.get(f"GATEWAY_TOKEN_{name.upper()}")
    headers = {"Authorization": f"Bearer {token}"} if token else {"X-Agent-Id": name}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=None)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield Agent(name, client, pace)


async def develop(pm: Agent, dev: Agent, issue: str, ask_a_person: bool) -> None:
    await pm.call("send_message", to="dev", subject="develop", body={"issue": issue})
    task = await dev.receive("develop")
    await dev.call("log_activity", message=f"working on {issue}")
    if ask_a_person:
        await dev.call(
            "request_human",
            reason=f"{issue}: the spec asks for both a v1 and a v2 API; which one should I build?",
        )
        print(
            "      >>> the pipeline needs a person: answer in the console at /broker, or with\n"
            "      >>>   gitlab-mcp-gateway broker instruct 'what the PM should do'"
        )
        instruction = await pm.receive("human")
        print(f"      >>> the person said: {instruction['body'].get('text')}")
        await pm.call("resume")
        await pm.call(
            "send_message", to="dev", subject="decision", body={"issue": issue, **instruction["body"]}
        )
        await dev.receive("decision")
    await dev.call("reply_message", reply_to=task["messageId"], subject="done", body={"issue": issue})
    await pm.receive("done")
    await dev.call("report_completion", issue=issue, result="pass")


async def main(url: str, pace: float) -> None:
    async with (
        connect(url, "pm", pace) as pm,
        connect(url, "dev", pace) as dev,
        connect(url, "reviewer", pace) as reviewer,
    ):
        phases = [{"phase": 1, "issues": ["DEMO-1", "DEMO-2"]}, {"phase": 2, "issues": ["DEMO-3"]}]
        await pm.call("set_phase_plan", plan_id="demo", phases=phases, auto_advance=False, cooldown_minutes=1)
        for phase in phases:
            await pm.call("start_phase", phase=phase["phase"], issues=phase["issues"])
            await pm.call("begin_developing")
            for issue in phase["issues"]:
                await develop(pm, dev, issue, ask_a_person=issue == "DEMO-2")
            last = phase is phases[-1]
            await reviewer.call("report_review", result="approved", has_next_phase=not last)
        print(
            "The plan is COMPLETED. To run it again, start over from the console or with: "
            "gitlab-mcp-gateway broker reset"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:8080/mcp")
    parser.add_argument("--pace", type=float, default=2.0, help="seconds between two calls (default 2)")
    options = parser.parse_args()
    asyncio.run(main(options.url, options.pace))
