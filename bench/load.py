"""The load generator of ``python -m bench``: aiohttp clients, fixed concurrency, per-call latency,
and what the server under test spent (CPU from ``/proc``, peak RSS) and asked of GitLab.

Connections come from 64 loopback source addresses (127.0.1.1 ... 127.0.1.64), calls spread over
them in turn: a server that rate limits per client address (the community server allows at most
1,000 requests a minute per address) is then measured, not throttled. Every server gets the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.e2e.rpc import initialize_request

SOURCES = [f"127.0.1.{i}" for i in range(1, 65)]
ACCEPT = "application/json, text/event-stream"
PROTOCOL = "2025-06-18"
Call = Callable[[aiohttp.ClientSession], Awaitable[None]]


class Clients:
    """One ``aiohttp.ClientSession`` per source address; :meth:`next` hands them out in turn."""

    def __init__(self) -> None:
        self.sessions = [
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, local_addr=(source, 0)),
                timeout=aiohttp.ClientTimeout(total=120),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            for source in SOURCES
        ]
        self._turn = 0

    def next(self) -> aiohttp.ClientSession:
        self._turn = (self._turn + 1) % len(self.sessions)
        return self.sessions[self._turn]

    async def close(self) -> None:
        for session in self.sessions:
            await session.close()


def post_call(url: str, body: bytes, headers: dict[str, str]) -> Call:
    """A plain POST answered 200 (the stub alone, the bare forwarder)."""

    async def call(http: aiohttp.ClientSession) -> None:
        async with http.post(url, data=body, headers=headers) as response:
            await response.read()
            if response.status != 200:
                raise RuntimeError(f"{url} answered {response.status}")

    return call


async def mcp_session(
    http: aiohttp.ClientSession, url: str, extra: dict[str, str] | None = None, protocol: str = PROTOCOL
) -> dict[str, str]:
    """Open an MCP session; the headers every later request of it carries."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT, **(extra or {})}
    init = initialize_request("bench", protocol)
    async with http.post(url, data=json.dumps(init), headers=headers) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"initialize answered {response.status}")
        session = response.headers.get("Mcp-Session-Id")
    if session:
        headers["Mcp-Session-Id"] = session
    headers["MCP-Protocol-Version"] = protocol
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, data=json.dumps(note), headers=headers) as response:
        await response.read()
    return headers


MODERN = "2026-07-28"


def modern_headers(tool: str) -> dict[str, str]:
    """The headers of a stateless 2026-07-28 ``tools/call`` (no session to open)."""
    return {
        "Content-Type": "application/json",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }


def modern_meta() -> dict[str, Any]:
    """The per-request ``_meta`` of a 2026-07-28 request."""
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    }


def tool_call(
    url: str,
    headers: dict[str, str],
    tool: str,
    arguments: dict[str, Any],
    meta: dict[str, Any] | None = None,
) -> Call:
    """``tools/call`` of ``tool`` (with ``meta`` as ``params._meta``: a 2026-07-28 request); a
    JSON-RPC error or an ``isError`` result raises."""
    params = json.dumps({"name": tool, "arguments": arguments, **({"_meta": meta} if meta else {})})
    ids = itertools.count(1)

    async def call(http: aiohttp.ClientSession) -> None:
        body = f'{{"jsonrpc":"2.0","id":{next(ids)},"method":"tools/call","params":{params}}}'
        async with http.post(url, data=body.encode(), headers=headers) as response:
            content = await response.read()
        if response.status != 200 or b'"isError":true' in content or b'"error":{' in content[:200]:
            raise RuntimeError(f"{tool} failed ({response.status}): {content[:300]!r}")

    return call


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid``, all its threads (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set so far (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pin(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` to ``cpus`` (no-op where the machine has fewer CPUs)."""
    if max(cpus) >= (os.cpu_count() or 1):
        return
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(int(task.name), cpus)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass
class Row:
    """One line of the table."""

    server: str
    tool: str
    concurrency: int
    calls: int = 0
    calls_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    cpu_ms_per_call: float = 0.0
    upstream_per_call: float = 0.0
    peak_rss_mib: float = 0.0
    errors: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


async def measure(
    clients: Clients,
    call: Call,
    *,
    calls: int,
    concurrency: int,
    pid: int,
    upstream_count: Callable[[], Awaitable[int]],
    row: Row,
    warmup: int | None = None,
) -> Row:
    """Warm up (``warmup`` calls, by default 50 or two per caller), then ``calls`` calls
    ``concurrency`` at a time; fill ``row``."""
    what = f"{row.server}, {row.tool}, c={row.concurrency}"
    warmup = max(50, 2 * concurrency) if warmup is None else warmup
    await _run(clients, call, warmup, concurrency, [], f"warm-up of {what}")
    latencies: list[float] = []
    cpu_before, upstream_before = cpu_seconds(pid), await upstream_count()
    wall, errors = await _run(clients, call, calls, concurrency, latencies, what)
    cpu_after, upstream_after = cpu_seconds(pid), await upstream_count()
    row.calls = len(latencies)
    row.errors = errors
    if latencies:
        row.calls_per_s = len(latencies) / wall
        row.p50_ms = percentile(latencies, 0.5) * 1e3
        row.p99_ms = percentile(latencies, 0.99) * 1e3
        row.cpu_ms_per_call = (cpu_after - cpu_before) / len(latencies) * 1e3
        row.upstream_per_call = (upstream_after - upstream_before) / len(latencies)
    row.peak_rss_mib = peak_rss_mib(pid)
    return row


async def _run(
    clients: Clients, call: Call, calls: int, concurrency: int, latencies: list[float], what: str
) -> tuple[float, int]:
    remaining = calls
    errors = 0
    first_error: BaseException | None = None

    async def worker() -> None:
        nonlocal remaining, errors, first_error
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            try:
                await call(clients.next())
            except Exception as exc:
                errors += 1
                first_error = first_error or exc
                if not str(exc):
                    first_error = RuntimeError(repr(exc))
                continue
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    if errors == calls:
        raise RuntimeError(f"{what}: every call failed; the first: {first_error}")
    if first_error is not None:
        print(f"  ({what}: {errors} calls failed; the first: {first_error})", flush=True)
    return wall, errors
