"""Tiny test tools and a small raw MCP client for the in-process gateway app.

The raw client speaks HTTP with aiohttp's test client, so tests see status codes, headers and SSE
frames exactly as a real client would.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from pydantic import Field

from gateway.errors import ToolError
from gateway.tools.context import ToolContext
from gateway.tools.registry import READ_ONLY, Annotations, Tool, ToolInput, ToolOutput, ToolResult

ACCEPT = "application/json, text/event-stream"


# -- test tools --------------------------------------------------------------------------------


@dataclass
class Probe:
    """What the test tools saw and did; tests steer them through it."""

    events: list[str] = field(default_factory=list)
    contexts: list[ToolContext] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


class EchoInput(ToolInput):
    text: str = Field(description="Text to send back")
    times: int = Field(1, ge=1, le=3, description="How many times to repeat it, 1 to 3")


class EchoOutput(ToolOutput):
    text: str


class WaitInput(ToolInput):
    steps: int = Field(0, ge=0, description="Progress notifications to send before waiting")


class NoInput(ToolInput):
    pass


class DeliverInput(ToolInput):
    wait: bool = Field(False, description="Wait for the test's release before answering")
    check: float | None = Field(None, description="read_check_seconds of the result")


def make_tools(probe: Probe) -> list[Tool]:
    """The tools of the MCP transport tests."""

    async def echo(ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
        probe.contexts.append(ctx)
        return {"text": args.text * args.times}

    async def wait(ctx: ToolContext, args: WaitInput) -> dict[str, Any]:
        probe.contexts.append(ctx)
        for step in range(1, args.steps + 1):
            await ctx.progress(step, args.steps, f"step {step}")
        probe.started.set()
        try:
            await probe.release.wait()
        except asyncio.CancelledError:
            probe.events.append("wait cancelled")
            raise
        return {"done": True}

    async def progress(ctx: ToolContext, args: NoInput) -> dict[str, Any]:
        for value in (1, 1, 0.5, 2, 3.5):
            await ctx.progress(value, None, None)
        return {"has_token": ctx.call.has_progress_token}

    async def crash(ctx: ToolContext, args: NoInput) -> dict[str, Any]:
        raise RuntimeError("secret internals: /etc/passwd")

    async def write(ctx: ToolContext, args: NoInput) -> dict[str, Any]:
        return {"written": True}

    async def refuse(ctx: ToolContext, args: NoInput) -> dict[str, Any]:
        raise ToolError("conflict", "Not now: the pipeline is paused; call resume first.")

    async def deliver(ctx: ToolContext, args: DeliverInput) -> ToolResult:
        if args.wait:
            probe.started.set()
            await probe.release.wait()

        async def delivered() -> None:
            probe.events.append("delivered")

        async def abandoned() -> None:
            probe.events.append("abandoned")

        return ToolResult(
            structured={"message": "hi"},
            on_delivered=delivered,
            on_abandoned=abandoned,
            read_check_seconds=args.check,
        )

    async def whoami(ctx: ToolContext, args: NoInput) -> dict[str, Any]:
        probe.contexts.append(ctx)
        credential = ctx.call.caller.credential
        return {
            "agent_id": ctx.agent_id,
            "credential": None if credential is None else credential.source,
            "request_id": ctx.call.request_id,
            "session_id": ctx.call.session_id,
        }

    local = Annotations(read_only=True, open_world=False, idempotent=True)
    return [
        Tool(
            name="echo",
            description="Send the text back.",
            input_model=EchoInput,
            output_model=EchoOutput,
            handler=echo,
            annotations=READ_ONLY,
            toolset="ci",
            aliases=("say",),
        ),
        Tool(
            name="wait",
            description="Wait until released.",
            input_model=WaitInput,
            handler=wait,
            annotations=local,
            toolset="broker",
            long_running=True,
        ),
        Tool(
            name="progress",
            description="Report progress.",
            input_model=NoInput,
            handler=progress,
            annotations=local,
            toolset="ci",
        ),
        Tool(
            name="crash",
            description="Fail.",
            input_model=NoInput,
            handler=crash,
            annotations=local,
            toolset="ci",
        ),
        Tool(
            name="write",
            description="Change something.",
            input_model=NoInput,
            handler=write,
            annotations=Annotations(read_only=False, destructive=True),
            toolset="repository",
            aliases=("write_old",),
        ),
        Tool(
            name="refuse",
            description="Refuse.",
            input_model=NoInput,
            handler=refuse,
            annotations=local,
            toolset="ci",
        ),
        Tool(
            name="deliver",
            description="A result with delivery callbacks.",
            input_model=DeliverInput,
            handler=deliver,
            annotations=Annotations(read_only=False),
            toolset="broker",
            long_running=True,
        ),
        Tool(
            name="deliver_json",
            description="A quick result with delivery callbacks.",
            input_model=DeliverInput,
            handler=deliver,
            annotations=Annotations(read_only=False),
            toolset="broker",
        ),
        Tool(
            name="whoami",
            description="Who is calling.",
            input_model=NoInput,
            handler=whoami,
            annotations=local,
            toolset="ci",
        ),
    ]


# -- SSE parsing ------------------------------------------------------------------------------


@dataclass
class SseEvent:
    id: str | None = None
    event: str | None = None
    data: str = ""
    comments: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.data)


def parse_sse(text: str) -> list[SseEvent]:
    """Every event (comments become events of their own with only ``comments``)."""
    events: list[SseEvent] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event = SseEvent()
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":"):
                event.comments.append(line[1:].strip())
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "id":
                event.id = value
            elif key == "event":
                event.event = value
            elif key == "data":
                data.append(value)
        event.data = "\n".join(data)
        events.append(event)
    return events


def messages_of(events: list[SseEvent]) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body (priming event and comments skipped)."""
    return [e.json() for e in events if e.data]


# -- raw MCP client ---------------------------------------------------------------------------


class Mcp:
    """A raw Streamable HTTP client over aiohttp's test client.

    Attributes:
        client: aiohttp's ``TestClient``.
        app: the gateway app.
        session_id: set by :meth:`initialize`.
        headers: sent with every request (``X-Agent-Id``, tokens...).
    """

    def __init__(self, client: TestClient[Any, Any], app: web.Application) -> None:
        self.client = client
        self.app = app
        self.session_id: str | None = None
        self.headers: dict[str, str] = {}
        self.version = "2025-11-25"
        self.gitlab_requests: list[Any] = []
        self._next = 0

    def next_id(self) -> int:
        self._next += 1
        return self._next

    def request_headers(
        self, headers: dict[str, str] | None = None, *, session: bool = True
    ) -> dict[str, str]:
        out = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": self.version}
        if session and self.session_id is not None:
            out["Mcp-Session-Id"] = self.session_id
        out.update(self.headers)
        out.update(headers or {})
        return {k: v for k, v in out.items() if v is not None}

    async def post(self, body: Any, headers: dict[str, str] | None = None, *, session: bool = True) -> Any:
        """POST ``body`` (encoded as JSON unless bytes/str); returns the aiohttp response."""
        data = body if isinstance(body, bytes | str) else json.dumps(body)
        return await self.client.post(
            "/mcp", data=data, headers=self.request_headers(headers, session=session)
        )

    async def initialize(
        self, version: str = "2025-11-25", headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """initialize + notifications/initialized; returns the InitializeResult."""
        resp = await self.post(
            {
                "jsonrpc": "2.0",
                "id": self.next_id(),
                "method": "initialize",
                "params": {
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            headers={"MCP-Protocol-Version": None, **(headers or {})},  # type: ignore[dict-item]
            session=False,
        )
        assert resp.status == 200, await resp.text()
        self.session_id = resp.headers["Mcp-Session-Id"]
        body = await resp.json()
        self.version = body["result"]["protocolVersion"]
        note = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        assert note.status == 202
        return dict(body["result"])

    async def rpc(
        self, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Send a request; the JSON-RPC response message (from JSON or from the SSE stream)."""
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id(), "method": method}
        if params is not None:
            msg["params"] = params
        resp = await self.post(msg, headers=headers)
        return await response_message(resp)

    async def call(self, name: str, arguments: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """``tools/call``; the JSON-RPC response message."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        params.update(kw)
        return await self.rpc("tools/call", params)


MODERN = "2026-07-28"


def modern_meta(version: str = MODERN, **extra: Any) -> dict[str, Any]:
    """The per-request ``_meta`` of a 2026-07-28 request."""
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        **extra,
    }


def modern_headers(method: str, name: str | None = None, version: str = MODERN) -> dict[str, str]:
    """The headers of a 2026-07-28 request (``Mcp-Name`` when ``name`` is given)."""
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


async def response_message(resp: Any) -> dict[str, Any]:
    """The JSON-RPC response in an HTTP response, JSON or SSE."""
    if resp.headers.get("Content-Type", "").startswith("text/event-stream"):
        messages = [m for m in messages_of(parse_sse(await resp.text())) if "id" in m]
        assert len(messages) == 1, messages
        return messages[0]
    return dict(await resp.json())
