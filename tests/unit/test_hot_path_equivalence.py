"""The fast path of log redaction answers exactly what the plain code it replaces would: the
redactor's ASCII trigger must agree with ``_RULE_TRIGGER`` (the case-insensitive expression it
stands in for), or a secret could skip the text rules.
"""

from __future__ import annotations

import pytest

from gateway.observability.redaction import _RULE_TRIGGER, _may_hold_secret


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
