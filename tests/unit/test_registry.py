"""The tool registry: declaration → tools/list, validation errors as tool results, read-only, aliases."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import Field

from gateway.broker.errors import BrokerError
from gateway.config import TOOLSETS
from gateway.errors import ToolError
from gateway.gitlab.errors import GitLabRateLimited, InvalidReference
from gateway.tools.access import NO_LIMITS, Restriction, header_restriction
from gateway.tools.caller import Caller
from gateway.tools.context import CallInfo, ToolContext
from gateway.tools.registry import (
    READ_ONLY,
    Annotations,
    Registry,
    ResultSchemaError,
    Tool,
    ToolInput,
    ToolOutput,
    ToolResult,
)


class EchoInput(ToolInput):
    id: str = Field(description="ID or full path of the project")
    first: int = Field(20, ge=1, le=100, description="page size, 1..100")
    include: list[Literal["jobs", "bridge_jobs"]] = Field(default_factory=list, max_length=1)


async def echo(ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
    return {"id": args.id, "first": args.first}


async def boom(ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
    raise GitLabRateLimited("Rate limited by GitLab. Retry after 7 seconds.", retry_after_seconds=7)


async def refuse(ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
    raise ToolError("not_found", "Pipeline 5 not found or inaccessible.")


ECHO = Tool(
    name="echo",
    description="echo",
    input_model=EchoInput,
    handler=echo,
    annotations=READ_ONLY,
    toolset="ci",
    aliases=("old_echo",),
)
WRITE = Tool(
    name="write",
    description="write",
    input_model=EchoInput,
    handler=echo,
    annotations=Annotations(read_only=False, destructive=True),
    toolset="ci",
)
BOOM = Tool(
    name="boom", description="b", input_model=EchoInput, handler=boom, annotations=READ_ONLY, toolset="ci"
)
REFUSE = Tool(
    name="refuse",
    description="r",
    input_model=EchoInput,
    handler=refuse,
    annotations=READ_ONLY,
    toolset="repository",
)


def ctx() -> ToolContext:
    return ToolContext(services=None, call=CallInfo(request_id="r1", caller=Caller(None, None)))  # type: ignore[arg-type]


async def test_listed_tool_has_schema_annotations_and_no_alias() -> None:
    reg = Registry([ECHO, WRITE])
    page, nxt = reg.list_page(0, 50)
    assert nxt is None
    names = [t["name"] for t in page]
    assert names == ["echo", "write"]
    echo_tool = page[0]
    assert echo_tool["inputSchema"]["additionalProperties"] is False
    assert echo_tool["inputSchema"]["required"] == ["id"]
    assert echo_tool["inputSchema"]["properties"]["include"]["items"]["enum"] == ["jobs", "bridge_jobs"]
    assert echo_tool["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": True,
    }


async def test_alias_calls_the_tool() -> None:
    reg = Registry([ECHO])
    tool = reg.resolve("old_echo")
    assert tool is ECHO
    result = await reg.call(tool, ctx(), {"id": "g/p"})
    assert result.structured == {"id": "g/p", "first": 20}
    assert result.to_mcp()["content"][0]["text"] == '{"id":"g/p","first":20}'


async def test_unknown_argument_is_a_tool_error_naming_it() -> None:
    reg = Registry([ECHO])
    result = await reg.call(ECHO, ctx(), {"id": "g/p", "frist": 3})
    assert result.is_error
    text = result.to_mcp()["content"][0]["text"]
    assert "unknown argument `frist` (did you mean `first`?)" in text
    assert "echo accepts: id, first, include" in text
    assert result.structured["error"]["reason"] == "bad_request"
    assert result.structured["error"]["invalid_arguments"] == ["frist"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            {"id": "g/p", "first": 0},
            "`first`: Input should be greater than or equal to 1 — page size, 1..100",
        ),
        ({"id": "g/p", "first": 101}, "`first`: Input should be less than or equal to 100"),
        ({}, "`id` is required — ID or full path of the project"),
        ({"id": "g/p", "include": ["nope"]}, "`include.0`: Input should be 'jobs' or 'bridge_jobs'"),
        ({"id": "g/p", "include": ["jobs", "bridge_jobs"]}, "`include`: List should have at most 1 item"),
        # JSON's type names, not Python's, and what was sent instead.
        ({"id": "g/p", "include": "jobs"}, '`include`: Input should be a JSON array, got "jobs"'),
        ({"id": "g/p", "include": {"jobs": True}}, "`include`: Input should be a JSON array, got an object"),
        ({"id": "g/p", "first": "ten"}, '`first`: Input should be an integer, got "ten"'),
    ],
)
async def test_invalid_arguments_name_the_argument(args: dict[str, Any], expected: str) -> None:
    result = await Registry([ECHO]).call(ECHO, ctx(), args)
    assert result.is_error
    assert expected in result.to_mcp()["content"][0]["text"]


async def test_invalid_calls_build_the_input_schema_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    import gateway.tools.registry as registry
    from gateway.tools.schemas import json_schema as real

    builds: list[object] = []

    def counting(model: Any) -> dict[str, Any]:
        builds.append(model)
        return real(model)

    monkeypatch.setattr(registry, "json_schema", counting)
    tool = replace(ECHO)  # a fresh declaration: nothing cached yet
    reg = Registry([tool])
    builds.clear()  # tools/list is built once by the registry
    for _ in range(50):
        result = await reg.call(tool, ctx(), {"id": "g/p", "first": 0})
        assert "— page size, 1..100" in result.to_mcp()["content"][0]["text"]
    assert len(builds) == 1


async def test_read_only_hides_and_refuses_write_tools() -> None:
    reg = Registry([ECHO, WRITE], read_only=True)
    assert [t.name for t in reg.listed] == ["echo"]
    with pytest.raises(ToolError) as err:
        reg.resolve("write")
    assert err.value.reason == "unauthorized"
    assert "read-only" in err.value.message


async def test_toolset_filter() -> None:
    reg = Registry([ECHO, REFUSE], toolsets=["repository"])
    assert [t.name for t in reg.listed] == ["refuse"]
    assert reg.resolve("nope") is None


async def test_tools_option_serves_named_tools_besides_toolsets() -> None:
    reg = Registry([ECHO, WRITE, REFUSE], toolsets=["repository"], enabled_tools=["old_echo"])
    assert [t.name for t in reg.listed] == ["echo", "refuse"]  # an alias names its tool
    only = Registry([ECHO, WRITE, REFUSE], enabled_tools=["write"])
    assert [t.name for t in only.listed] == ["write"]
    with pytest.raises(ToolError, match="toolset 'ci', which this gateway does not serve"):
        only.resolve("echo")


async def test_access_layers_narrow_and_name_what_hides() -> None:
    reg = Registry([ECHO, WRITE, REFUSE], toolsets=["ci"])
    token = Restriction("the client token of agent 'dev'", tools=frozenset({"write", "refuse"}))
    access = NO_LIMITS.narrowed(token).narrowed(Restriction("the header", read_only=True))
    assert reg.listed_for(NO_LIMITS.narrowed(token)) == [WRITE.to_mcp()]
    assert reg.listed_for(access) == []
    # the deployment's reason comes first, then each layer's in order
    assert "this gateway does not serve" in (reg.why_hidden(REFUSE, access) or "")
    assert (reg.why_hidden(ECHO, access) or "").startswith(
        "echo belongs to toolset 'ci', which the client token"
    )
    assert reg.why_hidden(WRITE, access) == (
        "write changes GitLab or broker state and the header allows only read-only tools"
    )


def test_header_restriction_ignores_unknown_names_and_never_means_all() -> None:
    assert header_restriction({}, TOOLSETS) is None
    assert header_restriction({"X-MCP-Toolsets": " ", "X-MCP-Readonly": "no"}, TOOLSETS) is None
    only_unknown = header_restriction({"X-MCP-Toolsets": "actions"}, TOOLSETS)
    assert only_unknown is not None and only_unknown.toolsets == frozenset()
    assert only_unknown.why_hidden(ECHO) is not None
    quoted = header_restriction({"X-MCP-Tools": "echo, <script>, " + "x" * 200}, TOOLSETS)
    assert quoted is not None and quoted.tools == frozenset({"echo"})
    both = header_restriction({"X-MCP-Toolsets": "ci, repos", "X-MCP-Readonly": "TRUE"}, TOOLSETS)
    assert both == Restriction(
        "this request's X-MCP-Toolsets and X-MCP-Readonly headers", frozenset({"ci"}), None, True
    )


async def test_gitlab_errors_become_tool_results_with_details() -> None:
    result = await Registry([BOOM]).call(BOOM, ctx(), {"id": "g/p"})
    assert result.is_error
    assert result.structured["error"]["reason"] == "rate_limited"
    assert result.structured["error"]["retry_after_seconds"] == 7
    mcp = result.to_mcp()
    assert mcp["isError"] is True
    assert mcp["content"][0]["text"] == "Rate limited by GitLab. Retry after 7 seconds."


async def test_tool_error_result_shape() -> None:
    result = await Registry([REFUSE]).call(REFUSE, ctx(), {"id": "g/p"})
    assert result.to_mcp()["structuredContent"] == {
        "error": {
            "reason": "not_found",
            "message": "Pipeline 5 not found or inaccessible.",
            "request_id": "r1",
        }
    }


def test_a_registry_given_a_callable_reads_the_declarations_at_first_use() -> None:
    # The app's registry: a gateway imports its tool modules at the first MCP request, not at start.
    reads: list[int] = []

    def declared() -> list[Tool]:
        reads.append(1)
        return [ECHO, WRITE]

    reg = Registry(declared, read_only=True, enabled_tools=["old_echo"])
    assert reads == []
    assert reg.resolve("old_echo") is ECHO
    assert [t.name for t in reg.listed] == ["echo"]
    assert reg.enabled_tools == frozenset({"echo"})
    assert reads == [1]
    with pytest.raises(AttributeError):
        reg.not_an_attribute  # noqa: B018 (only the index is built on demand)


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        Registry(
            [
                ECHO,
                Tool(
                    name="old_echo",
                    description="x",
                    input_model=EchoInput,
                    handler=echo,
                    annotations=READ_ONLY,
                    toolset="ci",
                ),
            ]
        )


def test_tool_result_with_human_text_keeps_json_block() -> None:
    mcp = ToolResult(structured={"a": 1}, text="Session is running.").to_mcp()
    assert [c["text"] for c in mcp["content"]] == ["Session is running.", '{"a":1}']


def test_list_pages() -> None:
    tools = [
        Tool(
            name=f"t{i}",
            description="x",
            input_model=EchoInput,
            handler=echo,
            annotations=READ_ONLY,
            toolset="ci",
        )
        for i in range(5)
    ]
    reg = Registry(tools)
    first, nxt = reg.list_page(0, 2)
    assert [t["name"] for t in first] == ["t0", "t1"] and nxt == 2
    last, nxt = reg.list_page(4, 2)
    assert [t["name"] for t in last] == ["t4"] and nxt is None


# -- results checked against the output model; typed errors turned into results at one edge -------


class EchoOutput(ToolOutput):
    id: str
    first: int


async def echo_model(ctx: ToolContext, args: EchoInput) -> EchoOutput:
    return EchoOutput(id=args.id, first=args.first)


async def echo_wrong(ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
    return {"id": args.id, "first": str(args.first)}  # a string where the schema promises an integer


async def bad_url(ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
    raise InvalidReference("The URL 'x' is not on this gateway's GitLab.")


async def broker_refusal(ctx: ToolContext, args: EchoInput) -> dict[str, Any]:
    raise BrokerError("conflict", "Only in IDLE.", state="PAUSED")


def _tool(handler: Any, **kw: Any) -> Tool:
    return Tool(
        name=handler.__name__,
        description="d",
        input_model=EchoInput,
        handler=handler,
        annotations=READ_ONLY,
        toolset="ci",
        output_model=EchoOutput,
        **kw,
    )


async def test_a_result_outside_its_output_schema_is_a_bug_not_an_answer() -> None:
    good = _tool(echo_model)
    assert (await Registry([good]).call(good, ctx(), {"id": "g/p"})).structured == {"id": "g/p", "first": 20}
    wrong = _tool(echo_wrong)
    with pytest.raises(ResultSchemaError, match="echo_wrong returned a result that does not match"):
        await Registry([wrong]).call(wrong, ctx(), {"id": "g/p"})


async def test_typed_errors_become_results_with_the_tools_hint() -> None:
    url = _tool(bad_url, reference_hint="Or pass `id`.")
    result = await Registry([url]).call(url, ctx(), {"id": "g/p"})
    assert result.is_error
    assert result.structured["error"]["reason"] == "bad_request"
    assert (
        result.structured["error"]["message"] == "The URL 'x' is not on this gateway's GitLab. Or pass `id`."
    )
    refusal = _tool(broker_refusal)
    error = (await Registry([refusal]).call(refusal, ctx(), {"id": "g/p"})).structured["error"]
    assert (error["reason"], error["message"], error["state"]) == ("conflict", "Only in IDLE.", "PAUSED")
