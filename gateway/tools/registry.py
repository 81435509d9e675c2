"""The tool registry: each tool declared once; ``tools/list``, validation and docs derive from it.

A tool module exposes ``TOOLS: list[Tool]``. A declaration holds the name, description, pydantic
input model (→ ``inputSchema``; unknown arguments rejected), optional output model
(→ ``outputSchema``), annotations, aliases (callable, never listed), toolset and handler::

    class GetThingInput(ToolInput):
        id: str = Field(description="ID or full path of the project")

    class GetThingOutput(ToolOutput):
        id: int

    GET_THING = Operation("get_thing", ThingAnswer)  # operations/<domain>/get_thing.graphql

    async def get_thing(ctx: ToolContext, args: GetThingInput) -> GetThingOutput:
        answer = await GET_THING.run(ctx.gitlab, {"fullPath": args.id})
        return GetThingOutput(id=answer.thing.id)

    TOOLS = [Tool(name="get_thing", description="...", input_model=GetThingInput,
                  output_model=GetThingOutput, handler=get_thing, annotations=READ_ONLY, toolset="ci")]

:meth:`Registry.call` validates arguments, runs the handler, checks its result against the
output model (a result that does not match the ``outputSchema`` agents were given is a bug, raised
as :class:`ResultSchemaError`, never sent), and turns the typed errors of the layers below into
``isError: true`` results through :mod:`gateway.tools.failures`, the one place where errors become
results (MCP 2025-11-25 server/tools#error-handling; input validation errors are tool results
per SEP-1303).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from gateway.config import DEFAULT_TOOLSETS, TOOLSETS, expand_toolsets
from gateway.errors import ToolError
from gateway.gitlab.errors import GitLabUnauthorized
from gateway.gitlab.operation import Operation
from gateway.tools.access import NO_LIMITS, ToolAccess
from gateway.tools.argument_errors import argument_name, describe_validation_error
from gateway.tools.call_limits import CallsInFlight, RejectedTokens

# Re-exported: tool modules declare with them.
from gateway.tools.declaration import NAME_PATTERN as NAME_PATTERN
from gateway.tools.declaration import READ_ONLY as READ_ONLY
from gateway.tools.declaration import Annotations as Annotations
from gateway.tools.declaration import ResultSchemaError as ResultSchemaError
from gateway.tools.declaration import ToolInput as ToolInput
from gateway.tools.declaration import ToolOutput as ToolOutput
from gateway.tools.failures import CURSOR_ARGUMENT, HANDLED, as_tool_error
from gateway.tools.rate_limits import AgentLimiter
from gateway.tools.result import ToolResult as ToolResult  # re-exported: handlers and the transport use it
from gateway.tools.result_redaction import redact_result, result_secrets
from gateway.tools.schemas import ERROR_SCHEMA, json_schema, without_descriptions

if TYPE_CHECKING:
    from gateway.tools.context import ToolContext

Handler = Callable[["ToolContext", Any], Awaitable[ToolResult | dict[str, Any] | BaseModel]]


@dataclass(frozen=True)
class Tool:
    """One tool's single declaration.

    Attributes:
        name: the MCP tool name (``^[A-Za-z0-9_.-]{1,128}$``).
        description: what it does and when to use it, for the model.
        input_model: pydantic model of the arguments (a :class:`ToolInput`).
        handler: ``async (ctx, args) -> ToolResult | dict | BaseModel``.
        annotations: MCP hints; ``read_only`` also decides visibility in read-only mode.
        toolset: ``ci``, ``repository``, ``duo_agent_platform`` or ``broker``.
        output_model: pydantic model of ``structuredContent`` → ``outputSchema``.
        aliases: older names that still call this tool; not listed.
        long_running: answer ``tools/call`` over SSE with keep-alives (waits and polls).
        long_running_when: for a tool that waits only when asked to (``wait_seconds``): True
            for the arguments of a call that may wait, which is then handled as ``long_running``.
        title: the human-readable title.
        reference_hint: the tool's other way to name its target, appended to the message when a
            URL or path argument is refused (e.g. "Or pass `project_id` and `pipeline_id`.").
        operations: the GraphQL operations the tool sends (its docs page lists them).
        client_capabilities: the client capabilities a call needs (e.g. ``sampling``); a
            client that did not declare them gets the protocol's -32021 error instead.
        wait_argument: the argument that says how many seconds a call may wait (its default
            when absent; None: the tool's longest). A client of the MCP tasks extension gets a
            task for a call that may wait longer than a few seconds (``gateway.mcp.protocol.tasks``).
        asks_before_task: for a client of the tasks extension, the call's first questions
            (``ctx.ask``) are asked with input-required results before its task is created, and
            the task runs the handler again with those answers; the handler runs up to that ask
            once per round, so it asks before any change.
        confirms_when: True for the arguments of a call that asks for a confirmation before it
            acts (``gateway.tools.confirmations``); where an operator confirms
            (``confirm_by = "operator"``) such a call waits, so it is handled as
            ``long_running``, and is a task for a client of the tasks extension.
    """

    name: str
    description: str
    input_model: type[BaseModel]
    handler: Handler
    annotations: Annotations
    toolset: str
    output_model: type[BaseModel] | None = None
    aliases: tuple[str, ...] = ()
    long_running: bool = False
    long_running_when: Callable[[Mapping[str, Any]], bool] | None = None
    title: str | None = None
    reference_hint: str | None = None
    operations: tuple[Operation[Any], ...] = ()
    client_capabilities: tuple[str, ...] = ()
    wait_argument: str | None = None
    asks_before_task: bool = False
    confirms_when: Callable[[Mapping[str, Any]], bool] | None = None

    def runs_long(self, arguments: Mapping[str, Any] | None, *, operator_confirms: bool = False) -> bool:
        """True when this call may wait (SSE with keep-alives; cancelled at once on shutdown).
        ``operator_confirms``: an operator confirms destructive actions (they wait for it)."""
        if self.long_running:
            return True
        if operator_confirms and _applies(self.confirms_when, arguments):
            return True
        return self.long_running_when is not None and _applies(self.long_running_when, arguments)

    def input_schema(self) -> dict[str, Any]:
        """JSON Schema (2020-12) of the arguments, ``$ref``s inlined, titles dropped, and without
        the input model's docstring: the tool's description, beside it in ``tools/list``, says
        what the arguments are for."""
        schema = json_schema(self.input_model)
        schema.pop("description", None)
        return schema

    @functools.cached_property
    def argument_schemas(self) -> Mapping[str, Any]:
        """The ``properties`` of :meth:`input_schema` (argument name → its schema), built once:
        every invalid call reads them. Read-only; a frozen dataclass without slots still has the
        ``__dict__`` that ``cached_property`` stores into."""
        properties: dict[str, Any] = self.input_schema().get("properties", {})
        return properties

    def output_schema(self, *, described: bool = False) -> dict[str, Any] | None:
        """JSON Schema of ``structuredContent``, or None.

        Error results carry ``structuredContent.error`` (the design's outside contract), and
        clients such as the MCP Inspector validate ``structuredContent`` against
        ``outputSchema`` even when ``isError`` is true. So the schema declares ``error`` and
        requires either the success fields or ``error``: both kinds of result conform.

        What ``tools/list`` sends (``described=False``) keeps what a validator checks of a
        result (types, nullability, required fields, enums) and leaves out the fields' prose:
        models are given a tool's description and ``inputSchema``, and the prose was 36% of the
        output schemas' bytes. Nor does it close objects (``additionalProperties: false``): that
        constrains what the gateway may add to a result, not what a reader may rely on. The
        tool's docs page shows the described, closed schema.
        """
        if self.output_model is None:
            return None
        schema = json_schema(self.output_model, share_repeated=True)
        if not described:
            schema = without_descriptions(schema)
        schema.setdefault("properties", {})["error"] = ERROR_SCHEMA
        required = schema.pop("required", None)
        if required:
            schema["anyOf"] = [{"required": required}, {"required": ["error"]}]
        return schema

    def to_mcp(self) -> dict[str, Any]:
        """The MCP ``Tool`` object for ``tools/list``."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema(),
            "annotations": self.annotations.to_mcp(),
        }
        if self.title:
            out["title"] = self.title
        schema = self.output_schema()
        if schema is not None:
            out["outputSchema"] = schema
        return out


def _applies(
    predicate: Callable[[Mapping[str, Any]], bool] | None, arguments: Mapping[str, Any] | None
) -> bool:
    if predicate is None or not isinstance(arguments, Mapping):
        return False
    try:
        return predicate(arguments)
    except (TypeError, ValueError):  # arguments not yet validated: the call will be refused
        return False


class Registry:
    """The set of tools one gateway serves, after the read-only switch and the toolset and tool
    filters; each caller sees the part its :class:`~gateway.tools.access.ToolAccess` allows.

    Args:
        tools: every declared tool, or what returns them when the registry is first used (the
            app's: a gateway imports its tool modules at its first MCP request, not at start).
        read_only: hide and refuse tools whose annotations are not read-only.
        toolsets: serve only these toolsets (``default`` and ``all`` included), and the tools named
            in ``enabled_tools`` (both empty: the default toolsets, all but ``superseded``).
        enabled_tools: serve these tools (names or aliases) besides ``toolsets``.
        limiter: the per-agent rate limits of GitLab tool calls (every toolset but ``broker``).
        in_flight: the cap on GitLab tool calls under way per caller.
        rejected_tokens: passthrough mode: GitLab's 401s per source (``gateway.tools.call_limits``).

    Raises:
        ValueError: two tools (or aliases) share a name, or a name is not MCP-valid.
    """

    #: Set by :meth:`_index`: at construction from a list, at first use from a callable.
    _all: dict[str, Tool]
    _aliases: dict[str, str]
    enabled_tools: frozenset[str]
    _served_toolsets: frozenset[str]
    _listed: list[Tool]

    def __init__(
        self,
        tools: Iterable[Tool] | Callable[[], Iterable[Tool]],
        *,
        read_only: bool = False,
        toolsets: Sequence[str] = (),
        enabled_tools: Sequence[str] = (),
        limiter: AgentLimiter | None = None,
        in_flight: CallsInFlight | None = None,
        rejected_tokens: RejectedTokens | None = None,
    ) -> None:
        self.read_only = read_only
        self._limiter = limiter
        self._in_flight = in_flight
        self._rejected_tokens = rejected_tokens
        self.toolsets = tuple(toolsets)
        self._declarations = tools
        self._enabled_names = tuple(enabled_tools)
        if not callable(tools):
            self._index()

    def __getattr__(self, name: str) -> Any:
        # Only the index (annotated above) is ever missing: a registry given a callable builds it here.
        if name in Registry.__annotations__ and "_declarations" in self.__dict__:
            self._index()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _index(self) -> None:
        tools = self._declarations() if callable(self._declarations) else self._declarations
        all_: dict[str, Tool] = {}
        aliases: dict[str, str] = {}
        for tool in tools:
            for name in (tool.name, *tool.aliases):
                if name in all_ or name in aliases:
                    raise ValueError(f"tool name {name!r} is declared twice")
            all_[tool.name] = tool
            for alias in tool.aliases:
                aliases[alias] = tool.name
        self._all, self._aliases = all_, aliases
        self.enabled_tools = frozenset(aliases.get(name, name) for name in self._enabled_names)
        # A toolset no option names (the conformance suite's fixtures, registered in a test mode)
        # is served wherever the default or all is: registering it is what asks for it.
        unnamed = frozenset(t.toolset for t in all_.values()) - frozenset(TOOLSETS)
        if self.toolsets or self.enabled_tools:
            keywords = {"default", "all"} & set(self.toolsets)
            self._served_toolsets = expand_toolsets(self.toolsets) | (unnamed if keywords else frozenset())
        else:
            self._served_toolsets = frozenset(DEFAULT_TOOLSETS) | unnamed
        self._listed = [t for t in all_.values() if self._why_hidden(t) is None]

    @functools.cached_property
    def _listed_mcp(self) -> list[dict[str, Any]]:
        # Built at the first tools/list, not at start: the schemas of 25 tools are a fifth of
        # the CPU a start costs, and a gateway may serve calls from clients that never list.
        return [t.to_mcp() for t in self._listed]

    def _why_hidden(self, tool: Tool) -> str | None:
        if self.read_only and not tool.annotations.read_only:
            return (
                f"{tool.name} changes GitLab or broker state and this gateway runs read-only "
                "(--read-only, GATEWAY_READ_ONLY or read_only in its config file): restart it without "
                "that to use this tool"
            )
        if tool.toolset not in self._served_toolsets and tool.name not in self.enabled_tools:
            if tool.toolset == "superseded":
                return (
                    f"{tool.name} is superseded by get_pipeline (its docs give the call it maps to), and "
                    "this gateway does not serve the superseded toolset: add it with --toolsets "
                    "default,superseded (or all), GATEWAY_TOOLSETS or toolsets in its config file"
                )
            return (
                f"{tool.name} belongs to toolset {tool.toolset!r}, which this gateway does not serve "
                "(its toolsets and tools options: --toolsets, --tools)"
            )
        return None

    def why_hidden(self, tool: Tool, access: ToolAccess = NO_LIMITS) -> str | None:
        """Why ``tool`` is hidden from a caller with ``access`` (the deployment's reason first),
        or None when that caller may list and call it."""
        return self._why_hidden(tool) or access.why_hidden(tool)

    @property
    def listed(self) -> list[Tool]:
        """Tools the deployment serves (``tools/list`` of a caller without limits), in
        declaration order."""
        return list(self._listed)

    def listed_for(self, access: ToolAccess) -> list[dict[str, Any]]:
        """The MCP tool objects a caller with ``access`` sees in ``tools/list``."""
        if not access.layers:
            return list(self._listed_mcp)
        return [
            mcp
            for tool, mcp in zip(self._listed, self._listed_mcp, strict=True)
            if access.why_hidden(tool) is None
        ]

    def list_page(self, offset: int, size: int) -> tuple[list[dict[str, Any]], int | None]:
        """One ``tools/list`` page: the MCP tool objects and the next offset (None at the end)."""
        page = self._listed_mcp[offset : offset + size]
        nxt = offset + size
        return page, (nxt if nxt < len(self._listed_mcp) else None)

    def declared(self, name: str) -> Tool | None:
        """The tool called ``name`` or whose alias is ``name``, served or not."""
        return self._all.get(self._aliases.get(name, name))

    def resolve(self, name: str, access: ToolAccess = NO_LIMITS) -> Tool | None:
        """The tool for ``name`` (aliases too) a caller with ``access`` may call, or None when no
        such tool is declared.

        Raises:
            ToolError: the tool exists but is hidden from this caller (``unauthorized``, saying
                which setting hides it).
        """
        tool = self.declared(name)
        if tool is None:
            return None
        why = self.why_hidden(tool, access)
        if why is not None:
            raise ToolError("unauthorized", why)
        return tool

    async def call(self, tool: Tool, ctx: ToolContext, arguments: dict[str, Any] | None) -> ToolResult:
        """Validate ``arguments``, run the handler, and return a result (errors included).

        Never raises for bad input or GitLab failures; other exceptions propagate to the
        dispatcher (JSON-RPC -32603), and so does ``asyncio.CancelledError``.
        """
        # The one edge every result crosses: no token leaves in it.
        return redact_result(await self._run(tool, ctx, arguments), result_secrets(ctx))

    async def _run(self, tool: Tool, ctx: ToolContext, arguments: dict[str, Any] | None) -> ToolResult:
        args: BaseModel | None = None
        held: str | None = None
        gitlab_tool = tool.toolset != "broker"
        try:
            args = parse_arguments(tool, arguments or {})
            if gitlab_tool:
                caller = ctx.call.caller
                if self._rejected_tokens is not None:
                    self._rejected_tokens.check(caller)
                if self._limiter is not None:
                    self._limiter.check(caller)
                if self._in_flight is not None:
                    held = self._in_flight.enter(caller)
            out = await tool.handler(ctx, args)
            if self._rejected_tokens is not None and gitlab_tool:
                self._rejected_tokens.accepted(ctx.call.caller)
        except HANDLED as err:
            if (
                self._rejected_tokens is not None
                and isinstance(err, GitLabUnauthorized)
                and err.status == 401
            ):
                self._rejected_tokens.rejected(ctx.call.caller)
            refusals = ctx.call.caller.gitlab_refusals
            if refusals is not None and isinstance(err, GitLabUnauthorized):
                # A signed-in person's token: the transport turns this into HTTP 401 or 403.
                refusals.append("insufficient_scope" if "insufficient_scope" in str(err) else str(err.status))
            cursor_sent = getattr(args, CURSOR_ARGUMENT, None) is not None
            error = as_tool_error(
                err, reference_hint=tool.reference_hint, cursor_sent=cursor_sent, tool=tool.name
            )
            return ToolResult.from_error(_with_request_id(error, ctx))
        finally:
            if held is not None:
                assert self._in_flight is not None
                self._in_flight.leave(held)
        if isinstance(out, BaseModel):
            structured = out.model_dump(mode="json", exclude_unset=True, by_alias=True)
            if tool.output_model is None or not isinstance(out, tool.output_model):
                check_result(tool, structured)  # an instance of the output model was checked when built
            return ToolResult(structured=structured)
        result = out if isinstance(out, ToolResult) else ToolResult(structured=out)
        if not result.is_error:
            check_result(tool, result.structured)
        return result


def check_result(tool: Tool, structured: dict[str, Any]) -> None:
    """Check a success result against the tool's output model.

    Raises:
        ResultSchemaError: it does not match (a missing field, another type, an unknown key where
            the model forbids them).
    """
    if tool.output_model is None:
        return
    try:
        tool.output_model.model_validate(structured, strict=True)
    except ValidationError as err:
        raise ResultSchemaError(
            f"{tool.name} returned a result that does not match its outputSchema: {err}"
        ) from None


def _with_request_id(err: ToolError, ctx: ToolContext) -> ToolError:
    # Every error names the request id, which the gateway's log lines (and GitLab, as
    # X-Request-Id) carry too, so an operator can find what happened.
    request_id = getattr(getattr(ctx, "call", None), "request_id", None)
    if request_id and "request_id" not in err.details:
        err.details["request_id"] = request_id
    return err


def parse_arguments(tool: Tool, arguments: dict[str, Any]) -> BaseModel:
    """Validate ``arguments`` against the tool's input model.

    Raises:
        ToolError: ``bad_request`` naming each wrong argument and what it accepts.
    """
    if not isinstance(arguments, dict):
        raise ToolError("bad_request", f"{tool.name}: arguments must be a JSON object")
    # Null for an optional argument means "not given" (model clients often send every argument,
    # null for those they leave out): its default applies. Null for a required argument is still
    # refused, and an unknown argument is refused whatever its value.
    fields = tool.input_model.model_fields
    arguments = {
        name: value
        for name, value in arguments.items()
        if value is not None or name not in fields or fields[name].is_required()
    }
    try:
        return tool.input_model.model_validate(arguments)
    except ValidationError as err:
        raise ToolError(
            "bad_request",
            describe_validation_error(tool.name, tool.argument_schemas, err),
            invalid_arguments=sorted({argument_name(e["loc"]) for e in err.errors()}),
        ) from None
