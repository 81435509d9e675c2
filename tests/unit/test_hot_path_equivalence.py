"""The fast paths of a ``tools/call`` answer exactly what the plain code they replace would.

- :meth:`ToolResult.to_mcp_json` serialises ``structuredContent`` once; its bytes must equal the
  encoding of :meth:`ToolResult.to_mcp` (what clients parse, and what SSE frames carry).
- the redactor's ASCII trigger must agree with ``_RULE_TRIGGER`` (the case-insensitive
  expression it stands in for), or a secret could skip the text rules.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import ToolError
from gateway.observability.logging import _RULE_TRIGGER, _may_hold_secret
from gateway.tools.registry import ToolResult


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


_JOBS: dict[str, Any] = {
    "id": 1001,
    "status": "failed",
    "jobs": [{"id": 7, "name": 'lint "strict"\n\u00e9\u2028', "allow_failure": False, "web_url": None}],
    "page_info": {"has_next_page": True, "end_cursor": "eyJpZCI6IjcifQ=="},
    "ratio": 0.25,
}


@pytest.mark.parametrize(
    "result",
    [
        ToolResult(structured=_JOBS),
        ToolResult(structured={}),
        ToolResult(structured={"a": 1}, text='Session is running.\nNext: \u00fcber "x"'),
        ToolResult.from_error(ToolError("not_found", "Pipeline 9 not found or inaccessible.")),
    ],
)
def test_encoded_result_is_the_encoding_of_the_result_object(result: ToolResult) -> None:
    assert result.to_mcp_json() == dumps(result.to_mcp())


@pytest.mark.parametrize(
    "text",
    [
        "mcp request method=tools/call tool=get_pipeline outcome=ok status=200",
        "f5d507b305fb4fca961ddc9afcc0d932",
        "see https://gitlab.example.com/x",
        "AUTHORIZATION: Bearer abc",
        "Private_Token=x",
        "X-Api-Key: 1",
        "apikey=2",
        "API-KEY",
        "sent glpat-abc and GLRT-x",
        "xglpat-abc",
        "gl-x",
        "glabcdefgh-x",
        "gr1348941abc",
        "_GITLAB_SESSION=1",
        "Passwd",
        "basic",
        "S\u00e9cret",
        "\u017fecret",  # long s: (?i) folds it to s
        "to\u212aen",  # Kelvin sign: (?i) folds it to k
        "caf\u00e9 token",
        "caf\u00e9 only",
        "",
    ],
)
def test_redaction_trigger_agrees_with_the_case_insensitive_expression(text: str) -> None:
    assert _may_hold_secret(text) is (_RULE_TRIGGER.search(text) is not None)
