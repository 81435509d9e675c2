"""``Content-Encoding`` on a request body: gzip and deflate bodies are decoded, anything else (or a
body that is not what its header says) is refused with a clear error; never an HTTP 500, and the
keep-alive connection still serves the client's next request."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from typing import Any

import pytest

from tests.unit.mcp.helpers import Mcp

PING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()


async def exchange(mcp: Mcp, requests: list[tuple[dict[str, str], bytes]]) -> list[tuple[int, bytes]]:
    """Send ``requests`` one after another on one raw keep-alive connection; (status, body) each."""
    server = mcp.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    answers: list[tuple[int, bytes]] = []
    try:
        for headers, body in requests:
            head = {
                "Host": f"127.0.0.1:{server.port}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "Content-Length": str(len(body)),
                "Mcp-Session-Id": mcp.session_id or "",
                "MCP-Protocol-Version": mcp.version,
                **headers,
            }
            lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
            writer.write(f"POST /mcp HTTP/1.1\r\n{lines}\r\n".encode() + body)
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 5)
            status = int(status_line.split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            answers.append((status, await reader.readexactly(length)))
    finally:
        writer.close()
    return answers


@pytest.mark.parametrize(
    ("encoding", "body"),
    [("gzip", gzip.compress(PING, mtime=0)), ("deflate", zlib.compress(PING)), ("identity", PING)],
)
async def test_compressed_bodies_are_decoded(mcp: Mcp, encoding: str, body: bytes) -> None:
    answers = await exchange(mcp, [({"Content-Encoding": encoding}, body), ({}, PING)])
    assert [status for status, _ in answers] == [200, 200]
    assert json.loads(answers[0][1])["result"] == {}


@pytest.mark.parametrize(
    ("encoding", "body", "status"),
    [
        ("br", b"\x0b\x02\x80" + PING, 415),  # not offered
        ("zstd", PING, 415),
        ("gzip", PING, 400),  # says gzip, is not
        ("deflate", b"\x00\x01not deflate", 400),
    ],
)
async def test_other_or_broken_encodings_are_refused_and_the_connection_lives(
    mcp: Mcp, encoding: str, body: bytes, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    answers = await exchange(mcp, [({"Content-Encoding": encoding}, body), ({}, PING)])
    assert answers[0][0] == status
    error: dict[str, Any] = json.loads(answers[0][1])["error"]
    assert "Content-Encoding" in error["message"]
    assert answers[1][0] == 200  # keep-alive intact
    assert json.loads(answers[1][1])["result"] == {}
    assert not any(r.exc_info for r in caplog.records)


async def test_a_small_gzip_body_that_decodes_past_the_size_limit_is_413(mcp: Mcp) -> None:
    bomb = gzip.compress(
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"0" * 5_000_000 + b'"}}'
    )
    assert len(bomb) < 1_048_576
    answers = await exchange(mcp, [({"Content-Encoding": "gzip"}, bomb), ({}, PING)])
    assert [status for status, _ in answers] == [413, 200]
