"""Structured logs: one JSON object per line, the request id on every line, no secret anywhere.

The end-to-end version (tokens sent to the running app in headers, URLs, arguments and GitLab's
answers) is ``test_log_redaction_app.py``; this file pins the formatter's rules.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from gateway.observability.logging import bind_request_id, register_secret
from gateway.observability.redaction import REDACTED, Redactor
from tests.unit.observability.conftest import LogCapture

SERVICE_TOKEN = "svc-0f3c9a7d2b1e4c5a"  # configured, no recognisable prefix
CLIENT_TOKEN = "client-secret-9b8a7c6d5e4f"  # configured client token
PASSTHROUGH = "glpat-Ab3dEfGh1jKlMn0pQrSt"  # a caller's GitLab token, unknown to the configuration
ROUTABLE = "glpat-Zx9Yw8Vu7Ts6Rq5Po4Nm.01.0w1c2m3p4"  # newer token format with dots
OAUTH = "8f14e45fceea167a5a36dedd4bea2543c2d8a5b0e6f1d2c3b4a5968778695a4b"  # OAuth access token
DEPLOY = "gldt-Qw3Er4Ty5Ui6Op7As8Df"
RUNTIME = "rt-4c1d2e3f4a5b6c7d8e9f"  # registered at run time with register_secret
ALL_SECRETS = [SERVICE_TOKEN, CLIENT_TOKEN, PASSTHROUGH, ROUTABLE, OAUTH, DEPLOY, RUNTIME]


class _Carrier:
    """An object whose str() carries a secret (exceptions, clients' reprs...)."""

    def __str__(self) -> str:
        return f"<session token={PASSTHROUGH}>"


def _emit_everywhere(log: logging.Logger) -> None:
    """Log each secret in every place a secret can end up in a log record."""
    register_secret(RUNTIME)
    log.info("message %s %s", SERVICE_TOKEN, f"Authorization: Bearer {OAUTH}")
    log.info(f"inline {CLIENT_TOKEN} and {RUNTIME} and {DEPLOY}")
    log.info(
        "mcp request",
        extra={
            "headers": {
                "Authorization": f"Bearer {CLIENT_TOKEN}",
                "PRIVATE-TOKEN": PASSTHROUGH,
                "Cookie": f"_gitlab_session={OAUTH}",
                "X-Agent-Id": "dev",
            },
            "url": f"https://oauth2:{ROUTABLE}@gitlab.example.com/api/v4/projects?private_token={PASSTHROUGH}&x=1",
            "path": f"/mcp?access_token={OAUTH}&token={SERVICE_TOKEN}",
            "arguments": {"url": f"https://gitlab.example.com/g/p/-/blob/main/a.py?private_token={ROUTABLE}"},
            "list": [f"Bearer {OAUTH}", {"token": RUNTIME}],
            "carrier": _Carrier(),
            "token": DEPLOY,
        },
    )
    try:
        try:
            raise KeyError(f"PRIVATE-TOKEN: {PASSTHROUGH}")
        except KeyError as inner:
            raise RuntimeError(
                f"GitLab said: invalid token {ROUTABLE}; request had {{'Authorization': 'Bearer {OAUTH}'}} "
                f"and {SERVICE_TOKEN}"
            ) from inner
    except RuntimeError:
        log.exception("tool failed with %s", CLIENT_TOKEN)
    log.warning("stack", stack_info=True, extra={"secret": RUNTIME, "password": SERVICE_TOKEN})
    log.info({"msg_dict": True, "authorization": f"Bearer {OAUTH}", "note": f"job_token={DEPLOY}"})


@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_no_secret_reaches_any_log_line(fmt: str, capture_logs: Callable[..., LogCapture]) -> None:
    capture = capture_logs(format=fmt, secrets=[SERVICE_TOKEN, CLIENT_TOKEN])
    _emit_everywhere(logging.getLogger("gateway.mcp"))

    assert len(capture.lines) >= 6
    for secret in ALL_SECRETS:
        leaks = [line for line in capture.lines if secret in line]
        assert not leaks, f"{secret} leaked: {leaks}"
        # not even the second half of one (a partial match would still help an attacker)
        assert secret[len(secret) // 2 :] not in capture.text
    assert REDACTED in capture.text
    # What identifies the place survives, so an operator can still read the line.
    assert "private_token=" + REDACTED in capture.text
    assert "glpat-" + REDACTED in capture.text
    assert "dev" in capture.text  # X-Agent-Id is not a secret
    if fmt == "json":
        records = capture.records()  # every line is one JSON object
        headers = next(r["headers"] for r in records if "headers" in r)
        assert headers == {
            "Authorization": REDACTED,
            "PRIVATE-TOKEN": REDACTED,
            "Cookie": REDACTED,
            "X-Agent-Id": "dev",
        }


def test_json_line_shape_and_request_id(capture_logs: Callable[..., LogCapture]) -> None:
    capture = capture_logs(format="json")
    log = logging.getLogger("gateway.gitlab")
    with bind_request_id("4b1f0c1e-req"):
        log.info(
            "gitlab request",
            extra={"operation": "get_pipeline", "method": "POST", "status": 200, "duration_ms": 12.5},
        )
        log.info("explicit", extra={"request_id": "other-id"})
    log.info("outside")

    first, explicit, outside = capture.records()
    assert list(first)[:4] == ["time", "level", "logger", "message"]
    assert first["time"].endswith("Z") and "T" in first["time"]
    assert first == {
        "time": first["time"],
        "level": "INFO",
        "logger": "gateway.gitlab",
        "message": "gitlab request",
        "operation": "get_pipeline",
        "method": "POST",
        "status": 200,
        "duration_ms": 12.5,
        "request_id": "4b1f0c1e-req",
    }
    assert explicit["request_id"] == "other-id"
    assert "request_id" not in outside


def test_plain_line_is_readable(capture_logs: Callable[..., LogCapture]) -> None:
    capture = capture_logs(format="plain")
    with bind_request_id("r-1"):
        logging.getLogger("gateway.mcp").info(
            "mcp request", extra={"method": "tools/call", "tool": "get_pipeline", "detail": "two words"}
        )
    (line,) = capture.lines
    assert " INFO    gateway.mcp: mcp request method=tools/call tool=get_pipeline " in line
    assert 'detail="two words"' in line
    assert line.endswith("request_id=r-1")


def test_level_and_chatty_libraries(capture_logs: Callable[..., LogCapture]) -> None:
    capture = capture_logs(format="json", level="WARNING")
    logging.getLogger("gateway.mcp").info("not shown")
    logging.getLogger("gateway.mcp").warning("shown")
    assert [r["message"] for r in capture.records()] == ["shown"]

    capture = capture_logs(format="json", level="INFO")  # replaces the handler: no duplicate lines
    logging.getLogger("httpx").info("HTTP Request: GET https://gitlab.example.com/api/v4/version")
    logging.getLogger("aiohttp.access").info("127.0.0.1 GET /healthz 200")
    logging.getLogger("gateway").info("once")
    assert [r["message"] for r in capture.records()] == ["once"]

    capture = capture_logs(format="json", level="DEBUG")
    logging.getLogger("aiohttp.access").info("127.0.0.1 GET /mcp?private_token=glpat-abcdefabcdef 200")
    assert [r["message"] for r in capture.records()] == ["127.0.0.1 GET /mcp?private_token=[REDACTED] 200"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def-ghi", "Authorization: [REDACTED]"),
        ("authorization: Basic dXNlcjpwYXNz", "authorization: [REDACTED]"),
        ("sent Bearer eyJhbGciOi.x.y to GitLab", "sent Bearer [REDACTED] to GitLab"),
        ("PRIVATE-TOKEN: abc123", "PRIVATE-TOKEN: [REDACTED]"),
        (
            "{'PRIVATE-TOKEN': 'abc123', 'X-Agent-Id': 'pm'}",
            "{'PRIVATE-TOKEN': '[REDACTED]', 'X-Agent-Id': 'pm'}",
        ),
        ('{"Job-Token": "abc123"}', '{"Job-Token": "[REDACTED]"}'),
        (
            "GET /api/v4/projects?private_token=abc&page=2",
            "GET /api/v4/projects?private_token=[REDACTED]&page=2",
        ),
        ("/oauth/token?access_token=abc#frag", "/oauth/token?access_token=[REDACTED]#frag"),
        ("https://user:p4ss@gitlab.example.com/x", "https://[REDACTED]@gitlab.example.com/x"),
        ("git clone https://oauth2:glpat-abc@h/g/p.git", "git clone https://[REDACTED]@h/g/p.git"),
        ("token glpat-abcdefghijklmnopqrst expired", "token glpat-[REDACTED] expired"),
        ("runner GR1348941abcdefghij registered", "runner GR1348941[REDACTED] registered"),
        ("trigger glptt-0123456789abcdef", "trigger glptt-[REDACTED]"),
        ("agent glagent-AbCdEf0123456789", "agent glagent-[REDACTED]"),
        ('"token": "abc"', '"token": "[REDACTED]"'),
        ("password=hunter2 user=bob", "password=[REDACTED] user=bob"),
        # nothing secret: untouched
        ("progressToken=7 gitlab request status=401", "progressToken=7 gitlab request status=401"),
        (
            "Check that the token is valid and has the api scope.",
            "Check that the token is valid and has the api scope.",
        ),
        ("https://gitlab.example.com/g/p/-/pipelines/42", "https://gitlab.example.com/g/p/-/pipelines/42"),
    ],
)
def test_text_rules(text: str, expected: str) -> None:
    assert Redactor().redact(text) == expected


def test_configured_secrets_are_redacted_verbatim_longest_first() -> None:
    redactor = Redactor(["abcd", "abcdefgh", "xy"])  # "xy" is too short to redact safely
    assert redactor.redact("abcdefgh abcd xy") == f"{REDACTED} {REDACTED} xy"


def test_runtime_secrets_are_bounded() -> None:
    redactor = Redactor(max_runtime_secrets=2)
    for secret in ("first-secret", "second-secret", "third-secret"):
        redactor.add_secret(secret)
    assert redactor.redact("first-secret second-secret third-secret") == f"first-secret {REDACTED} {REDACTED}"


def test_runtime_secrets_are_found_at_word_edges() -> None:
    redactor = Redactor()
    oauth = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    redactor.add_secret(oauth)
    redactor.add_secret("with space secret")  # not one token run: redacted verbatim all the same
    text = f"token {oauth}. url=https://h/x?t={oauth}&a=1 ({oauth}) /{oauth}/ -{oauth} with space secret"
    assert redactor.redact(text) == (
        f"token {REDACTED}. url=https://h/x?t={REDACTED}&a=1 ({REDACTED}) /{REDACTED}/ -{REDACTED} {REDACTED}"
    )


def test_many_runtime_secrets_keep_redaction_fast() -> None:
    import time

    redactor = Redactor()
    for i in range(4096):
        redactor.add_secret(f"passthrough-token-{i:08d}")
    line = "mcp request method=tools/call tool=get_pipeline outcome=ok request_id=4b1f0c1e9a8d7c6b " * 3
    started = time.perf_counter()
    for _ in range(200):
        redactor.redact(line + "passthrough-token-00004095")
    per_line = (time.perf_counter() - started) / 200
    assert redactor.redact("passthrough-token-00004095") == REDACTED
    assert per_line < 0.002  # independent of the 4096 registered secrets


def test_short_runtime_secrets_do_not_blank_ordinary_words() -> None:
    redactor = Redactor()
    for short in ("test", "te!t", "la", "1234567"):  # under 8 characters: not registered
        redactor.add_secret(short)
    assert redactor.redact("latest test 1234567 te!t") == "latest test 1234567 te!t"
    assert redactor.redact("PRIVATE-TOKEN: te!t") == f"PRIVATE-TOKEN: {REDACTED}"  # key rule still applies


def test_odd_runtime_secrets_are_redacted_verbatim() -> None:
    redactor = Redactor()
    odd = "a!9f8e7d6c5b4a"  # not one run of token characters
    redactor.add_secret(odd)
    assert redactor.redact(f"got {odd}, then {odd}.") == f"got {REDACTED}, then {REDACTED}."
    assert redactor.redact("nothing here: a! 9f8e7d6c") == "nothing here: a! 9f8e7d6c"


def test_many_distinct_odd_runtime_secrets_register_in_bounded_time_and_memory() -> None:
    """Pre-auth callers choose the token: 20000 odd ones must neither rebuild a pattern per
    token (quadratic: 3000 took 77 s) nor grow any set without bound."""
    import hashlib
    import time

    redactor = Redactor(max_runtime_secrets=1000)
    # Token-like but the same every run (no outcome may depend on random bytes).
    tokens = [f"a!{hashlib.sha256(str(i).encode()).hexdigest()[:24]}" for i in range(20_000)]
    tokens += [f"initialize!{i}" for i in range(200)]  # one shared anchor: its bucket stays small
    # CPU time, not wall time: about 0.15 s here, while a busy machine stretched the wall time
    # past 2 s (the quadratic version needed 77 s of CPU for 3000).
    started = time.thread_time()
    for token in tokens:
        redactor.add_secret(token)
    elapsed = time.thread_time() - started
    assert elapsed < 1.0
    assert len(redactor._runtime) == 1000
    assert len(redactor._anchored) <= 1000
    assert len(redactor._anchored["initialize"]) <= 4
    assert redactor._literal is None  # the configured set did not grow
    assert redactor.redact(f"x {tokens[-201]} y") == f"x {REDACTED} y"  # newest kept
    assert redactor.redact(f"x {tokens[0]} y") == f"x {tokens[0]} y"  # oldest dropped
    line = "mcp request method=initialize outcome=ok request_id=4b1f0c1e9a8d7c6b " * 3
    started = time.perf_counter()
    for _ in range(200):
        redactor.redact(line)
    assert (time.perf_counter() - started) / 200 < 0.002


@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_fields_named_like_secret_parameters_are_redacted(
    fmt: str, capture_logs: Callable[..., LogCapture]
) -> None:
    # feed_token=..., db_password=...: as secret in a field as in a URL's query.
    capture = capture_logs(format=fmt)
    logging.getLogger("gateway.mcp").info(
        "mcp request", extra={"feed_token": "feedvalue123", "db_password": "hunter2hunter2", "tool": "x"}
    )
    assert "feedvalue123" not in capture.text
    assert "hunter2hunter2" not in capture.text
    assert "x" in capture.text


@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_a_token_used_as_a_key_is_redacted(fmt: str, capture_logs: Callable[..., LogCapture]) -> None:
    capture = capture_logs(format=fmt)
    logging.getLogger("gateway.mcp").info("mcp request", extra={"seen": {PASSTHROUGH: "x", "ok": 1}})
    assert PASSTHROUGH not in capture.text
    assert "glpat-" + REDACTED in capture.text
