"""Test mode ``--conformance-fixtures``, tasks extension: the tools the conformance suite's
``tasks-*`` scenarios call by name (https://github.com/modelcontextprotocol/conformance,
``src/scenarios/server/tasks/``), registered beside the other fixtures.

- ``greet``: answers at once (never a task).
- ``slow_compute``: sleeps ``seconds`` (its wait argument), so a call of a second or more
  becomes a task for a client of the extension; cancelled by ``tasks/cancel``.
- ``failing_job``: a tool error after a second; it needs the extension (a client without it gets
  -32021), as the suite's "task support required" tool.
- ``protocol_error_job``: raises after a second, which fails its task with a JSON-RPC error.
- ``confirm_delete``: a task that asks to confirm deleting ``filename`` (``input_required``,
  answered by ``tasks/update``), then says what it did.
- ``multi_input``: a task that asks two questions at once (two keys outstanding).
- ``test_tool_with_task``: asks for a name with input-required results on the ``tools/call``,
  then becomes a task whose result greets that name.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from gateway.mcp.protocol.task_parts import TASKS_EXTENSION
from gateway.testing.conformance.fixtures import FixtureTool
from gateway.tools.context import ToolContext
from gateway.tools.input_requests import CannotAsk, elicit
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


class DeleteInput(BaseModel):
    model_config = ConfigDict(extra="allow")
    filename: str = "file.txt"


class NoInput(BaseModel):
    model_config = ConfigDict(extra="allow")


def _form(**fields: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": kind} for name, kind in fields.items()}}


def _content(answer: Any) -> dict[str, Any]:
    """An ``ElicitResult``'s content when the person accepted, else empty."""
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        return {}
    content = answer.get("content")
    return content if isinstance(content, dict) else {}


def _cannot_ask(err: CannotAsk) -> ToolResult:
    return _text(f"This fixture asks the client ({err.capability}); declare that capability.", is_error=True)


async def _confirm_delete(ctx: ToolContext, args: DeleteInput) -> ToolResult:
    question = elicit(f"Delete {args.filename}?", _form(confirm="boolean"))
    try:
        answers = await ctx.ask({"confirm": question})
    except CannotAsk as err:
        return _cannot_ask(err)
    if _content(answers["confirm"]).get("confirm") is True:
        return _text(f"Deleted {args.filename}.")
    return _text(f"Kept {args.filename}: the deletion was not confirmed.")


async def _multi_input(ctx: ToolContext, args: NoInput) -> ToolResult:
    try:
        answers = await ctx.ask(
            {
                "first": elicit("First input?", _form(name="string", confirm="boolean")),
                "second": elicit("Second input?", _form(name="string", confirm="boolean")),
            }
        )
    except CannotAsk as err:
        return _cannot_ask(err)
    names = [str(_content(answers[key]).get("name")) for key in ("first", "second")]
    return _text(f"Received {names[0]} and {names[1]}.")


async def _tool_with_task(ctx: ToolContext, args: NoInput) -> ToolResult:
    try:
        answers = await ctx.ask({"user_name": elicit("What is your name?", _form(name="string"))})
    except CannotAsk as err:
        return _cannot_ask(err)
    return _text(f"Hello, {_content(answers['user_name']).get('name')}!")


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
    FixtureTool(
        name="confirm_delete",
        description="Conformance fixture confirm_delete: asks to confirm deleting `filename`; needs tasks.",
        input_model=DeleteInput,
        handler=_confirm_delete,
        annotations=_ANNOTATIONS,
        toolset="conformance",
        client_capabilities=(TASKS_EXTENSION,),
        schema=_schema(DeleteInput),
    ),
    FixtureTool(
        name="multi_input",
        description="Conformance fixture multi_input: asks two questions at once; needs tasks.",
        input_model=NoInput,
        handler=_multi_input,
        annotations=_ANNOTATIONS,
        toolset="conformance",
        client_capabilities=(TASKS_EXTENSION,),
        schema=_schema(NoInput),
    ),
    FixtureTool(
        name="test_tool_with_task",
        description="Conformance fixture test_tool_with_task: asks a name, then greets it as a task.",
        input_model=NoInput,
        handler=_tool_with_task,
        annotations=_ANNOTATIONS,
        toolset="conformance",
        client_capabilities=(TASKS_EXTENSION,),
        asks_before_task=True,
        schema=_schema(NoInput),
    ),
]
