"""HTTP-level rules of /mcp (MCP 2025-11-25 basic/transports: "GET", "Protocol version
header", "Origin and Host", "JSON-RPC errors")."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import pytest

from gateway.mcp.http import endpoint
from tests.conftest import REPO
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


# -- protocol version header ---------------------------------------------------------------


async def test_unsupported_protocol_version_header_is_32022_listing_both_eras(mcp: Mcp) -> None:
    resp = await mcp.post(PING, headers={"MCP-Protocol-Version": "2099-01-01"})
    assert resp.status == 400
    body = await resp.json()
    assert body["id"] == 1
    assert body["error"]["code"] == -32022
    # A handshake version in `supported` keeps dual-era clients falling back to initialize.
    assert body["error"]["data"] == {
        "supported": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"],
        "requested": "2099-01-01",
    }
    assert "2099-01-01" in body["error"]["message"]


async def test_absent_version_header_is_accepted(mcp: Mcp) -> None:
    resp = await mcp.post(PING, headers={"MCP-Protocol-Version": None})  # type: ignore[dict-item]
    assert resp.status == 200


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26"])
async def test_older_supported_versions_work_end_to_end(mcp_factory: MakeMcp, version: str) -> None:
    client = await mcp_factory()
    await client.initialize(version)
    assert client.version == version
    body = await client.call("echo", {"text": "x"})
    assert body["result"]["structuredContent"] == {"text": "x"}


# -- batches -------------------------------------------------------------------------------


async def test_batch_is_refused_for_2025_11_25(mcp: Mcp) -> None:
    resp = await mcp.post([PING, {"jsonrpc": "2.0", "id": 2, "method": "ping"}])
    assert resp.status == 400
    body = await resp.json()
    assert body["error"]["code"] == -32600
    assert body["id"] is None  # a batch has no single id to echo
    assert "one message per POST" in body["error"]["message"]


async def test_batch_is_refused_when_session_negotiated_2025_06_18_even_without_header(
    mcp_factory: MakeMcp,
) -> None:
    client = await mcp_factory()
    await client.initialize("2025-06-18")
    resp = await client.post([PING], headers={"MCP-Protocol-Version": None})  # type: ignore[dict-item]
    assert resp.status == 400


async def test_batch_is_served_for_2025_03_26(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    await client.initialize("2025-03-26")
    resp = await client.post(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {
                "jsonrpc": "2.0",
                "id": "b",
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "z"}},
            },
            {"jsonrpc": "2.0", "id": 3, "method": "nope"},
            {"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": "2025-03-26"}},
            "garbage",
        ],
        headers={"MCP-Protocol-Version": None},  # type: ignore[dict-item]
    )
    assert resp.status == 200
    answers = await resp.json()
    assert [a.get("id") for a in answers] == [1, "b", 3, 4, None]
    assert answers[0]["result"] == {}
    assert answers[1]["result"]["structuredContent"] == {"text": "z"}
    assert answers[2]["error"]["code"] == -32601
    assert answers[3]["error"]["code"] == -32600
    assert answers[4]["error"]["code"] == -32600


async def test_batch_of_notifications_only_is_202(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    await client.initialize("2025-03-26")
    resp = await client.post([{"jsonrpc": "2.0", "method": "notifications/initialized"}])
    assert resp.status == 202


async def test_empty_batch_is_invalid(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    await client.initialize("2025-03-26")
    resp = await client.post([])
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == -32600


# -- JSON-RPC shape ------------------------------------------------------------------------


async def test_invalid_json_is_parse_error_with_null_id(mcp: Mcp) -> None:
    resp = await mcp.post(b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert resp.status == 400
    body = await resp.json()
    # JSON-RPC 2.0: null when the request's id could not be read (the SDK client needs the member).
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": body["error"]["message"]},
    }
    assert "not valid JSON" in body["error"]["message"]


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("NaN", "NaN found"),
        ("-Infinity", "-Infinity found"),
        ("Infinity", "Infinity found"),
        ("1e400", "1e400"),
    ],
)
async def test_nan_and_infinity_are_parse_errors(mcp: Mcp, value: str, named: str) -> None:
    body = (
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "save_pipeline", '
        f'"arguments": {{"project_id": "g/p", "ref": "main", "inputs": {{"x": {value}}}}}}}}}'
    ).encode()
    resp = await mcp.post(body)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == -32700
    assert error["message"].startswith("Parse error: NaN/Infinity are not JSON (")
    assert named in error["message"]


async def test_deeply_nested_json_is_parse_error(mcp: Mcp) -> None:
    resp = await mcp.post(b"[" * 200_000)
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == -32700


async def test_json_nested_too_deeply_is_called_that_not_invalid(mcp: Mcp) -> None:
    meta = '{"a": ' * 1000 + "1" + "}" * 1000
    body = '{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"_meta": ' + meta + "}}"
    resp = await mcp.post(body.encode())
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == -32700
    assert "not valid JSON" not in error["message"]
    assert "too deeply" in error["message"]


async def test_a_bug_in_the_transport_is_a_json_rpc_500_without_internals(
    mcp: Mcp, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("internal detail")

    monkeypatch.setattr("gateway.mcp.http.endpoint.classify", broken)
    resp = await mcp.post(PING, headers={"X-Request-Id": "bug-1"})
    assert resp.status == 500
    body = await resp.json()
    assert body["error"]["code"] == -32603
    assert "bug-1" in body["error"]["message"]
    assert "internal detail" not in json.dumps(body)
    assert any(r.exc_info for r in caplog.records)


async def test_invalid_utf8_is_parse_error(mcp: Mcp) -> None:
    resp = await mcp.post(b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}')
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == -32700


@pytest.mark.parametrize(
    ("message", "expected_id"),
    [
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, 1),
        ({"id": "a", "method": "ping"}, "a"),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, 1),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 1}, 1),
        ("ping", None),
        (42, None),
    ],
)
async def test_wrong_shape_is_invalid_request(mcp: Mcp, message: object, expected_id: object) -> None:
    resp = await mcp.post(json.dumps(message))
    assert resp.status == 400
    body = await resp.json()
    assert body["error"]["code"] == -32600
    assert "id" in body and body["id"] == expected_id  # null when the id could not be read


async def test_unknown_method_is_32601(mcp: Mcp) -> None:
    body = await mcp.rpc("resources/list")
    assert body["error"]["code"] == -32601
    assert "resources/list" in body["error"]["message"]


@pytest.mark.parametrize("request_id", [-(2**63) - 1, 2**64, 10**30])
async def test_an_id_past_64_bits_is_echoed_in_answers_and_errors(mcp: Mcp, request_id: int) -> None:
    # JSON has no integer limit; orjson, which writes the answers, refuses these.
    for message, key in (
        ({"jsonrpc": "2.0", "id": request_id, "method": "ping"}, "result"),
        ({"jsonrpc": "2.0", "id": request_id, "method": "resources/list"}, "error"),
    ):
        resp = await mcp.post(message)
        assert resp.status == 200
        body = json.loads(await resp.read())
        assert body["id"] == request_id and key in body


async def test_params_not_an_object_is_32602(mcp: Mcp) -> None:
    resp = await mcp.post({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": [1, 2]})
    assert resp.status == 200
    body = await resp.json()
    assert body["id"] == 3
    assert body["error"]["code"] == -32602


# -- content negotiation and size ----------------------------------------------------------


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream", "text/html"])
async def test_accept_without_both_types_is_406(mcp: Mcp, accept: str) -> None:
    resp = await mcp.post(PING, headers={"Accept": accept})
    assert resp.status == 406
    assert "Accept: application/json, text/event-stream" in (await resp.json())["error"]["message"]


@pytest.mark.parametrize(
    "accept", ["*/*", "application/json;q=0.9, text/event-stream", "application/*, text/*"]
)
async def test_accept_wildcards_pass(mcp: Mcp, accept: str) -> None:
    assert (await mcp.post(PING, headers={"Accept": accept})).status == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
async def test_non_json_content_type_is_415(mcp: Mcp, content_type: str) -> None:
    resp = await mcp.post(PING, headers={"Content-Type": content_type})
    assert resp.status == 415
    assert "Content-Type: application/json" in (await resp.json())["error"]["message"]


@pytest.mark.parametrize(("version", "era"), [("2026-07-28", "modern"), ("2025-11-25", "legacy")])
async def test_a_request_refused_before_its_body_is_read_is_logged_in_its_headers_era(
    mcp: Mcp, caplog: pytest.LogCaptureFixture, version: str, era: str
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mcp")
    resp = await mcp.post(PING, headers={"Content-Type": "text/plain", "MCP-Protocol-Version": version})
    assert resp.status == 415
    [line] = [r for r in caplog.records if r.name == "gateway.mcp" and r.getMessage() == "mcp request"]
    assert (line.__dict__["era"], line.__dict__["outcome"], line.__dict__["status"]) == (era, "rejected", 415)


async def test_json_with_charset_passes(mcp: Mcp) -> None:
    assert (await mcp.post(PING, headers={"Content-Type": "application/json; charset=utf-8"})).status == 200


async def test_body_too_large_is_413(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(server={"max_request_bytes": 2048})
    await client.initialize()
    resp = await client.call("echo", {"text": "x" * 4000})
    assert resp["error"]["code"] == -32600
    raw = await client.post({"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"pad": "x" * 4000}})
    assert raw.status == 413
    assert "server.max_request_bytes (2048 bytes)" in (await raw.json())["error"]["message"]


async def test_a_body_that_stops_arriving_is_408_not_waited_for_forever(
    mcp: Mcp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(endpoint, "BODY_SECONDS", 0.2)
    server = mcp.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    head = "".join(f"{k}: {v}\r\n" for k, v in mcp.request_headers().items())
    # Content-Length promises 100 bytes; 10 come, then the client goes quiet (hung, not gone).
    writer.write(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Content-Length: 100\r\n\r\n".encode())
    writer.write(b'{"jsonrpc"')
    await writer.drain()
    try:
        answer = await asyncio.wait_for(reader.read(4096), 10)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout"
    error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == -32600
    assert "did not arrive within 0.2 s" in error["message"]
    assert (await mcp.post(PING)).status == 200  # other requests are served as ever


# -- GET -----------------------------------------------------------------------------------


async def test_get_is_405(mcp: Mcp) -> None:
    resp = await mcp.client.get(
        "/mcp", headers={"Accept": "text/event-stream", "Mcp-Session-Id": mcp.session_id or ""}
    )
    assert resp.status == 405
    assert resp.headers["Allow"] == "POST, DELETE"


async def test_get_without_event_stream_accept_is_405(mcp: Mcp) -> None:
    assert (await mcp.client.get("/mcp", headers={"Accept": "application/json"})).status == 405


# -- Origin and Host -----------------------------------------------------------------------


async def test_bad_origin_is_403(mcp: Mcp) -> None:
    resp = await mcp.post(PING, headers={"Origin": "http://evil.example.com"})
    assert resp.status == 403
    body = await resp.json()
    assert body["id"] is None  # refused before the body was read
    assert "allowed_origins" in body["error"]["message"]


async def test_null_origin_is_403(mcp: Mcp) -> None:
    assert (await mcp.post(PING, headers={"Origin": "null"})).status == 403


async def test_bad_host_is_403_before_anything_else(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory()
    resp = await client.post(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        headers={"Host": "evil.example.com", "Origin": "http://evil.example.com"},
        session=False,
    )
    assert resp.status == 403
    resp = await client.post(PING, headers={"Host": "evil.example.com:8080"}, session=False)
    assert resp.status == 403
    assert "allowed_hosts" in (await resp.json())["error"]["message"]


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("localhost", "http://localhost"),
        ("localhost:9999", "http://localhost:3000"),
        ("127.0.0.1:1234", "https://127.0.0.1:8443"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("127.0.0.5", None),
        ("LOCALHOST.", None),
    ],
)
async def test_loopback_host_and_origin_pass(mcp: Mcp, host: str, origin: str | None) -> None:
    headers = {"Host": host}
    if origin:
        headers["Origin"] = origin
    assert (await mcp.post(PING, headers=headers)).status == 200


async def test_delete_and_get_check_origin(mcp: Mcp) -> None:
    bad = {"Origin": "http://evil.example.com", "Mcp-Session-Id": mcp.session_id or ""}
    assert (await mcp.client.delete("/mcp", headers=bad)).status == 403
    assert (await mcp.client.get("/mcp", headers=bad)).status == 403


async def test_allowed_hosts_and_origins_from_settings(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(
        server={
            "allowed_hosts": ["gw.internal", "other.internal:9000"],
            "allowed_origins": ["https://ui.example.com/"],
        }
    )
    await client.initialize()
    ok = [
        {"Host": "gw.internal:1234", "Origin": "https://ui.example.com"},
        {"Host": "other.internal:9000"},
    ]
    for headers in ok:
        assert (await client.post(PING, headers=headers)).status == 200, headers
    bad = [{"Host": "other.internal:9001"}, {"Host": "gw.internal", "Origin": "https://ui.example.com:444"}]
    for headers in bad:
        assert (await client.post(PING, headers=headers)).status == 403, headers


async def test_non_loopback_bind_accepts_any_host_but_still_checks_origin(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(
        server={"host": "0.0.0.0"},
        client_tokens=[{"token": "s3cret-pm-0123456789", "agent_id": "pm"}],
    )
    client.headers = {"Authorization": "Bearer s3cret-pm-0123456789"}
    await client.initialize(headers={"Host": "gateway.svc.cluster.local:8080"})
    assert (await client.post(PING, headers={"Host": "gateway.svc.cluster.local:8080"})).status == 200
    assert (await client.post(PING, headers={"Origin": "http://evil.example.com"})).status == 403


# -- request ids and logs ------------------------------------------------------------------


async def test_request_id_is_reused_when_well_formed(mcp: Mcp) -> None:
    resp = await mcp.post(PING, headers={"X-Request-Id": "abc.DEF_123-x"})
    assert resp.headers["X-Request-Id"] == "abc.DEF_123-x"


@pytest.mark.parametrize("incoming", ["has space", "x" * 65, "semi;colon", ""])
async def test_request_id_is_replaced_when_malformed(mcp: Mcp, incoming: str) -> None:
    resp = await mcp.post(PING, headers={"X-Request-Id": incoming})
    got = resp.headers["X-Request-Id"]
    assert got != incoming
    assert uuid.UUID(hex=got).hex == got


async def test_errors_carry_request_id_too(mcp: Mcp) -> None:
    resp = await mcp.post(PING, headers={"Mcp-Session-Id": "unknown", "X-Request-Id": "r1"})
    assert resp.status == 404
    assert resp.headers["X-Request-Id"] == "r1"


async def test_one_log_line_per_request_without_secrets(mcp: Mcp, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.mcp")
    await mcp.post(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "say", "arguments": {"text": "hi"}},
        },
        headers={"X-Request-Id": "req-42", "PRIVATE-TOKEN": "glpat-secret-value"},
    )
    records = [r for r in caplog.records if r.name == "gateway.mcp" and r.getMessage() == "mcp request"]
    assert len(records) == 1
    rec = records[0]
    assert (rec.method, rec.tool, rec.outcome, rec.request_id, rec.status) == (  # type: ignore[attr-defined]
        "tools/call",
        "echo",
        "ok",
        "req-42",
        200,
    )
    assert rec.era == "legacy"  # type: ignore[attr-defined]
    assert rec.session and rec.session not in (mcp.session_id or "")  # type: ignore[attr-defined]
    assert isinstance(rec.duration_ms, float)  # type: ignore[attr-defined]
    assert "glpat-secret-value" not in repr(rec.__dict__)
    assert (mcp.session_id or "") not in repr(rec.__dict__)
    # Every field of the line is explained where operators read about logs.
    operations = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    logs = operations.split("## Logs", 1)[1].split("\n## ")[0]
    standard = vars(logging.makeLogRecord({})).keys() | {"message", "asctime", "taskName"}
    fields = [key for key in vars(rec) if key not in standard and not key.startswith("_")]
    assert "era" in fields
    assert [key for key in fields if f"`{key}`" not in logs] == []


async def test_mcp_request_metrics_use_bounded_labels(mcp: Mcp) -> None:
    await mcp.rpc("ping")
    await mcp.rpc("made/up/" + "x" * 50)
    await mcp.post(b"{", headers={})
    text = await (await mcp.client.get("/metrics")).text()
    assert 'gateway_mcp_requests_total{method="ping",outcome="ok"} 1.0' in text
    assert 'gateway_mcp_requests_total{method="other",outcome="error"} 1.0' in text
    assert 'gateway_mcp_requests_total{method="other",outcome="rejected"} 1.0' in text
    assert 'gateway_mcp_requests_total{method="initialize",outcome="ok"} 1.0' in text
    assert 'gateway_mcp_requests_total{method="notifications/initialized",outcome="ok"} 1.0' in text
    assert "made/up" not in text
