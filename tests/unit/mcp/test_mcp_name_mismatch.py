"""The -32020 error of an ``Mcp-Name`` header that does not repeat the body's name (MCP 2026-07-28,
https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/streamable-http): it
says what was expected, what was received (cut short, printable only) and what to send."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import CIMultiDict

from gateway.mcp.http.envelope import check_stateless_request
from gateway.mcp.protocol.wire import HEADER_MISMATCH, RpcError
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import MODERN, modern_headers, modern_meta


def refusal(name: Any, header: str | None, method: str = "tools/call") -> str:
    headers = CIMultiDict({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
    if header is not None:
        headers["Mcp-Name"] = header
    key = "taskId" if method.startswith("tasks/") else "name"
    with pytest.raises(RpcError) as raised:
        params = {key: name, "_meta": modern_meta()}
        check_stateless_request(method, params, headers, methods=frozenset({method}))
    assert raised.value.code == HEADER_MISMATCH
    return raised.value.message


def test_a_different_name_is_echoed_beside_the_expected_one() -> None:
    assert refusal("get_pipeline", "get_pipelines") == (
        'Header mismatch: Mcp-Name must equal params.name, "get_pipeline", but the request sent '
        'Mcp-Name: "get_pipelines". Send Mcp-Name with the same value as params.name (base64-wrapped '
        "as =?base64?<base64 of its UTF-8>?= when it is not plain ASCII)."
    )


def test_a_missing_header_is_said_to_be_missing() -> None:
    message = refusal("get_pipeline", None)
    assert 'must equal params.name, "get_pipeline", but the request sent no Mcp-Name header.' in message


def test_the_parameter_named_is_the_methods_own() -> None:
    assert "must equal params.taskId, " in refusal("task-1", "task-2", "tasks/get")


def test_a_long_or_unprintable_value_is_cut_short_and_escaped() -> None:
    message = refusal("get_pipeline", "\x1b[31m" + "x" * 500 + "\u202e")
    assert "\x1b" not in message and "\u202e" not in message and "x" * 100 not in message
    assert 'Mcp-Name: "\\u001b[31m' in message and "… (506 characters)" in message
    assert all(c.isprintable() for c in message)
    # The body's value is the caller's too.
    body = refusal("a\nb" * 100, "x")
    assert "\n" not in body and "(300 characters)" in body


def test_a_malformed_base64_header_is_shown_as_sent() -> None:
    message = refusal("get_pipeline", "=?base64?!!?=")
    assert 'the request sent Mcp-Name: "=?base64?!!?="' in message


async def test_the_client_reads_it_in_the_json_rpc_error(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": modern_meta()},
    }
    resp = await client.post(body, headers=modern_headers("tools/call", "write"), session=False)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == HEADER_MISMATCH
    assert 'must equal params.name, "echo", but the request sent Mcp-Name: "write"' in error["message"]
