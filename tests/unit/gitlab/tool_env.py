"""Run a declared tool in-process against a respx-mocked GitLab: ``ToolEnv.call(name, args)``.

The registry does what ``tools/call`` does (argument validation, handler, error mapping), with a
real :class:`GitLabClient` on an ``httpx.AsyncClient`` that respx intercepts, and a fake sleep
that records its arguments instead of waiting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from jsonschema import Draft202012Validator

from gateway.cache import CacheRegistry
from gateway.config import Settings
from gateway.gitlab.client import GitLabClient
from gateway.gitlab.credentials import Credential, service_credential
from gateway.observability.metrics import Metrics
from gateway.server.services import Services
from gateway.tools import all_tools
from gateway.tools.caller import Caller
from gateway.tools.context import CallInfo, ToolContext
from gateway.tools.registry import Registry

_DEFAULT = object()


@dataclass
class ToolEnv:
    """A registry, a GitLab client and the sleeps the client asked for."""

    settings: Settings
    http: httpx.AsyncClient
    sleeps: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.metrics = Metrics()
        self.registry = Registry(
            all_tools(), toolsets=self.settings.toolsets, enabled_tools=self.settings.tools
        )

        async def fake_sleep(seconds: float) -> None:
            self.sleeps.append(seconds)

        self.gitlab = GitLabClient(
            self.settings.gitlab, metrics=self.metrics, http=self.http, sleep=fake_sleep
        )
        self.services = Services(
            settings=self.settings,
            gitlab=self.gitlab,
            caches=CacheRegistry(enabled=True, max_entries=64, metrics=self.metrics),
            metrics=self.metrics,
        )

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        *,
        credential: Credential | object | None = _DEFAULT,
    ) -> dict[str, Any]:
        """``tools/call`` ``name`` with ``arguments``; returns the MCP ``CallToolResult`` JSON."""
        tool = self.registry.resolve(name)
        assert tool is not None, f"no tool {name}"
        if credential is _DEFAULT:
            token = self.settings.gitlab.token
            credential = service_credential(token.get_secret_value() if token else None)
        caller = Caller(agent_id=None, credential=credential)  # type: ignore[arg-type]
        ctx = ToolContext(self.services, CallInfo(request_id="req-test-1", caller=caller))
        result = await self.registry.call(tool, ctx, arguments)
        return result.to_mcp()


def ok(result: dict[str, Any], tool: str = "get_pipeline") -> dict[str, Any]:
    """The structuredContent of a successful result, checked against the tool's outputSchema
    and against its JSON text block."""
    assert not result.get("isError"), result
    structured: dict[str, Any] = result["structuredContent"]
    assert json.loads(result["content"][-1]["text"]) == structured
    schema = next(t for t in all_tools() if t.name == tool).output_schema()
    assert schema is not None
    Draft202012Validator(schema).validate(structured)
    return structured


def error(result: dict[str, Any]) -> dict[str, Any]:
    """``structuredContent.error`` of a failed result; its message is also the first text block."""
    assert result.get("isError") is True, result
    err: dict[str, Any] = result["structuredContent"]["error"]
    assert result["content"][0]["text"] == err["message"]
    # Every tool error names its request id (the id on the gateway\'s log lines for the call).
    assert err.pop("request_id", None), err
    return err
