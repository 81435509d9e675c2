"""Tool results carry no secret the gateway holds; errors are redacted like log lines; clean
results pass untouched (same object: no copy on the hot path)."""

from __future__ import annotations

from gateway.observability.redaction import REDACTED
from gateway.tools.registry import ToolResult
from gateway.tools.result_redaction import redact_result

SERVICE = "glpat-service-token-abcdef"
CALLER = "caller-opaque-token-1234"


def test_a_clean_result_is_returned_as_is() -> None:
    result = ToolResult(structured={"content": "x" * 1000, "items": [1, {"a": "b"}]})
    assert redact_result(result, (SERVICE, CALLER)) is result


def test_held_secrets_leave_every_string_and_key_of_a_success() -> None:
    result = ToolResult(
        structured={"content": f"token = {SERVICE}\n", "nested": [{f"k{CALLER}": "v"}], "n": 3},
        text=f"echo {CALLER}",
    )
    out = redact_result(result, (SERVICE, CALLER))
    assert out.structured == {"content": f"token = {REDACTED}\n", "nested": [{f"k{REDACTED}": "v"}], "n": 3}
    assert out.text == f"echo {REDACTED}"
    assert result.structured["content"].endswith(f"{SERVICE}\n")  # the original is not changed


def test_success_data_is_not_pattern_redacted() -> None:
    config = "variables:\n  token: $CI_JOB_TOKEN\nAuthorization: Bearer example\nglpat-EXAMPLE in docs\n"
    result = ToolResult(structured={"content": config})
    assert redact_result(result, (SERVICE,)).structured["content"] == config


def test_errors_get_the_log_rules_too() -> None:
    error = ToolResult(
        structured={
            "error": {"reason": "bad_request", "message": "PRIVATE-TOKEN: glpat-unknownvalue123 refused"}
        },
        text="see https://user:pw@gitlab.example.com/x?private_token=abc",
        is_error=True,
    )
    out = redact_result(error, ())
    assert "glpat-unknownvalue123" not in str(out.structured)
    assert "pw@" not in (out.text or "") and "private_token=abc" not in (out.text or "")


def test_delivery_callbacks_survive_redaction() -> None:
    async def delivered() -> None:
        return None

    result = ToolResult(structured={"body": SERVICE}, on_delivered=delivered)
    assert redact_result(result, (SERVICE,)).on_delivered is delivered


def test_a_secret_json_escapes_is_found_all_the_same() -> None:
    # The clean-result check scans the encoded JSON; a secret with a quote, a backslash or a
    # control character is written differently there, so the result is walked instead.
    odd = 'pa"ss\\word\tsecret-1234'
    result = ToolResult(structured={"log": f"login with {odd} done", "ok": [odd]})
    out = redact_result(result, (odd,))
    assert out.structured == {"log": f"login with {REDACTED} done", "ok": [REDACTED]}
    assert odd not in out.to_mcp()["content"][0]["text"]


def test_the_text_block_is_the_redacted_json() -> None:
    result = ToolResult(structured={"body": f"x {SERVICE} y"})
    assert SERVICE in result.to_mcp()["content"][0]["text"]  # encoded before redaction
    out = redact_result(result, (SERVICE,))
    assert out.to_mcp()["content"][0]["text"] == f'{{"body":"x {REDACTED} y"}}'
