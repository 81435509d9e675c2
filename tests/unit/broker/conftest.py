"""Broker unit fixtures: a real BrokerService on a temporary state folder, tools called through
``Registry.call`` with a hand-built ``ToolContext`` (as the transport would)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest

from gateway.broker.service import BrokerService, open_broker
from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.server.services import Services
from gateway.tools import broker as broker_tools
from gateway.tools.caller import Caller
from gateway.tools.context import CallInfo, ToolContext
from gateway.tools.registry import Registry, ToolResult

_VALIDATORS: dict[str, jsonschema.Draft202012Validator] = {}

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


class Env:
    """One broker and a way to call its tools as a given agent."""

    def __init__(self, settings: Settings, metrics: Metrics, broker: BrokerService) -> None:
        self.settings = settings
        self.metrics = metrics
        self.broker = broker
        self.registry = Registry(broker_tools.TOOLS)
        self.services = Services(
            settings=settings, gitlab=cast(Any, None), caches=cast(Any, None), metrics=metrics, broker=broker
        )

    @property
    def state_dir(self) -> Path:
        return Path(self.settings.state_dir)

    def ctx(
        self, agent: str | None, progress: ProgressFn | None = None, claimed: str | None = None
    ) -> ToolContext:
        """A call as ``agent``; ``claimed``: the ``X-Agent-Id`` value the transport passed on."""
        caller = Caller(agent_id=agent, credential=None, claimed_agent_id=claimed)
        info = CallInfo(request_id="test", caller=caller)
        if progress is not None:
            info.progress = progress
            info.has_progress_token = True
        return ToolContext(services=self.services, call=info)

    async def call(
        self,
        agent: str | None,
        tool: str,
        args: dict[str, Any] | None = None,
        progress: ProgressFn | None = None,
        *,
        claimed: str | None = None,
    ) -> ToolResult:
        """Call ``tool`` as ``agent``; the result is checked against the tool's outputSchema."""
        declared = self.registry.resolve(tool)
        assert declared is not None, tool
        result = await self.registry.call(declared, self.ctx(agent, progress, claimed), args or {})
        if not result.is_error:
            validator = _VALIDATORS.get(tool)
            if validator is None:
                schema = declared.output_schema()
                assert schema is not None
                jsonschema.Draft202012Validator.check_schema(schema)
                validator = _VALIDATORS[tool] = jsonschema.Draft202012Validator(schema)
            validator.validate(result.structured)
        return result

    async def ok(self, agent: str | None, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call and expect success; a delivered message is acknowledged as the transport would."""
        result = await self.call(agent, tool, args)
        assert not result.is_error, result.structured
        if result.on_delivered is not None:
            await result.on_delivered()
        return result.structured

    async def err(
        self, agent: str | None, tool: str, args: dict[str, Any] | None = None, *, claimed: str | None = None
    ) -> dict[str, Any]:
        """Call and expect an ``isError`` result; returns ``structuredContent.error``."""
        result = await self.call(agent, tool, args, claimed=claimed)
        assert result.is_error, result.structured
        assert result.text == result.structured["error"]["message"]
        error: dict[str, Any] = result.structured["error"]
        return error

    async def status(self) -> dict[str, Any]:
        return await self.ok("pm", "get_pipeline_status")

    async def wait(self, agent: str, timeout: float = 0) -> dict[str, Any]:
        return await self.ok(agent, "wait_for_message", {"timeout_sec": timeout})


EnvFactory = Callable[..., Awaitable[Env]]


@pytest.fixture
async def make_env(
    make_settings: Callable[..., Settings], broker_database_at_head: str | None
) -> AsyncIterator[EnvFactory]:
    """``await make_env(broker={...})`` → an :class:`Env`; every broker opened is closed at teardown.

    Calling it again with the same settings reopens the same state folder (a restart).
    """
    opened: list[Any] = []

    async def make(settings: Settings | None = None, **overrides: Any) -> Env:
        if settings is None:
            broker = overrides.setdefault("broker", {})
            if broker_database_at_head is not None:
                broker.setdefault("database_url", broker_database_at_head)
            settings = make_settings(**overrides)
        metrics = Metrics()
        cm = open_broker(settings, metrics)
        broker = await cm.__aenter__()
        opened.append(cm)
        return Env(settings, metrics, broker)

    yield make
    for cm in reversed(opened):
        await cm.__aexit__(None, None, None)


@pytest.fixture
async def env(make_env: EnvFactory) -> Env:
    return await make_env()


async def close(env: Env) -> None:
    """Close ``env``'s broker now (a clean stop), so the folder can be reopened."""
    await env.broker.close()
