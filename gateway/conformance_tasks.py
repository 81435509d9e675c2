"""Test mode ``--conformance-fixtures``, tasks extension: the tools the conformance suite's
``tasks-*`` scenarios call by name (https://github.com/modelcontextprotocol/conformance,
``src/scenarios/server/tasks/``), registered beside the other fixtures.

- ``greet``: answers at once (never a task).
- ``slow_compute``: sleeps ``seconds`` (its wait argument), so a call of a second or more
  becomes a task for a client of the extension; cancelled by ``tasks/cancel``.
- ``failing_job``: a tool error after a second; it needs the extension (a client without it gets
  -32021), as the suite's "task support required" tool.
- ``protocol_error_job``: raises after a second, which fails its task with a JSON-RPC error.
"""

from __future__ import annotations

import asyncio
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from gateway.conformance_fixtures import FixtureTool
from gateway.mcp.protocol.tasks import TASKS_EXTENSION
from gateway.tools.context import ToolContext
from gateway.tools.registry import Annotations, Tool, ToolResult

_ANNOTATIONS: Final = Annotations(read_only=True, open_world=False)


class GreetInput(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = "World"


class SlowInput(BaseModel):
    model_config = ConfigDict(extra="allow")
    seconds: float = Field(1.0, ge=0, le=3600)
    label: str = ""


class JobInput(BaseModel):
    model_config = ConfigDict(extra="allow")
    seconds: float = Field(1.5, ge=0, le=60)


def _text(text: str, *, is_error: bool = False) -> ToolResult:
    return ToolResult(structured={}, content=[{"type": "text", "text": text}], is_error=is_error)


async def _greet(ctx: ToolContext, args: GreetInput) -> ToolResult:
    return _text(f"Hello, {args.name}!")


async def _slow_compute(ctx: ToolContext, args: SlowInput) -> ToolResult:
    await asyncio.sleep(args.seconds)
    return _text(f"Computed {args.label or 'result'} after {args.seconds:g} s.")


async def _failing_job(ctx: ToolContext, args: JobInput) -> ToolResult:
    await asyncio.sleep(args.seconds)
    return _text("The job failed: this fixture always reports a tool error.", is_error=True)


async def _protocol_error_job(ctx: ToolContext, args: JobInput) -> ToolResult:
    await asyncio.sleep(args.seconds)
    raise RuntimeError("protocol_error_job fails on purpose (a conformance fixture)")


def _schema(model: type[BaseModel]) -> dict[str, object]:
    return model.model_json_schema()


#: The fixture tools of the tasks scenarios.
TOOLS: Final[list[Tool]] = [
    FixtureTool(
        name="greet",
        description="Conformance fixture greet: answers Hello, {name}! at once.",
        input_model=GreetInput,
        handler=_greet,
        annotations=_ANNOTATIONS,
        toolset="conformance",
        schema=_schema(GreetInput),
    ),
    FixtureTool(
        name="slow_compute",
        description="Conformance fixture slow_compute: sleeps `seconds`, then answers.",
        input_model=SlowInput,
        handler=_slow_compute,
        annotations=_ANNOTATIONS,
        toolset="conformance",
        wait_argument="seconds",
        schema=_schema(SlowInput),
    ),
    FixtureTool(
        name="failing_job",
        description="Conformance fixture failing_job: a tool error after a second; needs tasks.",
        input_model=JobInput,
        handler=_failing_job,
        annotations=_ANNOTATIONS,
        toolset="conformance",
        wait_argument="seconds",
        client_capabilities=(TASKS_EXTENSION,),
        schema=_schema(JobInput),
    ),
    FixtureTool(
        name="protocol_error_job",
        description="Conformance fixture protocol_error_job: raises after a second (a JSON-RPC error).",
        input_model=JobInput,
        handler=_protocol_error_job,
        annotations=_ANNOTATIONS,
        toolset="conformance",
        wait_argument="seconds",
        schema=_schema(JobInput),
    ),
]
