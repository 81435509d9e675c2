"""The attacks one request or one caller may try, repeated against the installed gateway, each
measured: the gateway's peak RSS during it, the worst ``/healthz`` latency while it ran (polled
every 100 ms from a thread of its own), what the attacker got, and whether another caller was
still served right after.

    .venv/bin/python -m bench attacks            # every row
    .venv/bin/python -m bench attacks --only batch,gzip

The gateway is the wheel built from this checkout (:mod:`tests.shipped`), started as users start
it, against a loopback GitLab that forwards to the repository's GitLab stand-in and turns hostile
on demand (:mod:`bench.hostile_gitlab`): ``[{},{},...]`` gzip-compressed (about 65 KB on the
wire, 63 MiB decoded) on the artifacts tree route or on GraphQL, an artifacts archive of 20,000
crafted paths, a 401 to any token but the stand-in's. Rows:

- ``batch``: a JSON-RPC batch of 520,000 trivial items in one POST under the 1 MiB body limit, then
  a batch of 2,000 ``get_pipeline`` calls (a 2025-03-26 session);
- ``gzip_tree`` / ``gzip_graphql``: ``get_job`` with ``include: ["artifacts"]`` while GitLab sends
  the gzip answer on the artifacts tree route; ``get_pipeline`` while GraphQL sends it;
- ``gzip_string``: ``get_pipeline`` while GraphQL sends an error message of 63 MiB, gzip-compressed
  (no bound but the bytes' refuses it: what an answer near that bound costs);
- ``sessions``: 6,000 ``initialize`` + ``DELETE`` pairs from one caller;
- ``console``: 400 live streams of the console from one sign-in;
- ``nearest``: ``get_artifact_file`` of a missing path over an archive of 20,000 crafted paths;
- ``globs``: 3,000 ``get_job`` calls, each with a distinct ``artifact_filter``;
- ``passthrough``: 40 calls with rotating bogus ``PRIVATE-TOKEN``s (a second gateway, passthrough);
- ``bidi``: U+202E and U+2066..U+2069 in arguments; the log is searched for them raw.

Peak RSS is the process's ``VmHWM``, reset before each row (``/proc/<pid>/clear_refs``). The
machine may be shared: the load average is printed; a ``/healthz`` past 1 s under load is told
apart from a blocked event loop by the gateway's CPU during that slowest probe, printed beside it
(far less than the probe's time: the gateway was waiting for a CPU, not busy), and its CPU share
over the whole row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.hostile_gitlab import HostileGitLab
from bench.rig import load_average
from tests.e2e.harness import GatewayProcess
from tests.e2e.rpc import decode, initialize_request
from tests.standin import dataset as ds
from tests.standin import job_logs
from tests.standin.fixtures import StandinProcess

CONSOLE_TOKEN = "bench-attacks-console-operator-token"
BIDI = "\u202e\u2066\u2067\u2068\u2069"
P = ds.PROJECT_PATH
JOB = job_logs.ARTIFACTS_JOB_ID
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass
class Outcome:
    row: str
    attacker: str
    others: str
    peak_mib: float = 0.0
    worst_healthz: float = 0.0
    #: The gateway's CPU seconds while the slowest /healthz was waited for.
    worst_cpu: float = 0.0
    cpu_share: float = 0.0
    seconds: float = 0.0


class HealthPoller:
    """``/healthz`` every 100 ms from a thread (the load generator's loop cannot delay it), and
    the gateway's CPU during the slowest probe: a slow probe the gateway spent busy is its loop
    blocked; one it spent mostly idle is the machine's other load keeping it off a CPU."""

    def __init__(self, url: str, pid: int) -> None:
        self.url = f"{url}/healthz"
        self.pid = pid
        self.worst = 0.0
        self.worst_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10, trust_env=False) as http:
            while not self._stop.is_set():
                started, cpu = time.monotonic(), cpu_seconds(self.pid)
                try:
                    ok = http.get(self.url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                took = time.monotonic() - started if ok else 10.0
                if took > self.worst:
                    self.worst, self.worst_cpu = took, cpu_seconds(self.pid) - cpu
                self._stop.wait(0.1)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(15)


def vm(pid: int, field: str) -> float:
    """``/proc/<pid>/status``'s ``field`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def reset_peak(pid: int) -> None:
    """VmHWM back to the current RSS (Linux 4.0+), so each row's peak is its own."""
    with contextlib.suppress(OSError):  # an older kernel: the peak is since the start
        Path(f"/proc/{pid}/clear_refs").write_text("5")


class Mcp:
    """JSON-RPC over Streamable HTTP, as small as the attacks need."""

    def __init__(self, http: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None) -> None:
        self.http, self.url = http, url
        self.headers = {**HEADERS, **(headers or {})}
        self.next_id = 0

    async def initialize(self, protocol: str = "2025-11-25") -> str:
        response = await self.http.post(
            self.url, json=initialize_request("attacker", protocol), headers=self.headers
        )
        response.raise_for_status()
        session = response.headers["mcp-session-id"]
        self.headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": protocol}
        await self.http.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers
        )
        return session

    async def post(self, content: bytes | str) -> httpx.Response:
        return await self.http.post(self.url, content=content, headers=self.headers)

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The tool's result (``isError`` and the structured content), or the JSON-RPC error."""
        self.next_id += 1
        params = {"name": tool, "arguments": arguments}
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": params}
        return decoded(await self.post(json.dumps(message)))


def decoded(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of an answer, or its status and text when it holds none."""
    try:
        message = decode(response)
    except ValueError:
        message = None
    if isinstance(message, dict):
        return message
    return {"http": response.status_code, "text": response.text[:200]}


def said(message: dict[str, Any]) -> str:
    """A short account of an answer: the JSON-RPC error, or the tool error's reason and message."""
    if "error" in message:
        return f"JSON-RPC {message['error'].get('code')}: {message['error'].get('message', '')[:90]}"
    result = message.get("result", message)
    if result.get("isError"):
        content = result.get("structuredContent") or {}
        error = content.get("error", content)
        reason = error.get("reason") or error.get("code") or error.get("kind") or ""
        text = error.get("message") or (result.get("content") or [{}])[0].get("text", "")
        return f"tool error {reason}: {str(text)[:90]}"
    return "success"


class Attacks:
    def __init__(self, gateway: GatewayProcess, hostile: HostileGitLab, workdir: Path) -> None:
        self.gateway, self.hostile, self.workdir = gateway, hostile, workdir
        self.http = httpx.AsyncClient(timeout=120, trust_env=False, limits=httpx.Limits(max_connections=600))

    async def victim(self) -> str:
        """Another caller's get_pipeline, right after the attack."""
        mcp = Mcp(self.http, self.gateway.mcp_url)
        await mcp.initialize()
        answer = await mcp.call("get_pipeline", project_id=P, pipeline_id=ds.PIPELINE_ID)
        return "get_pipeline served" if said(answer) == "success" else f"get_pipeline: {said(answer)}"

    async def batch(self) -> tuple[str, str]:
        mcp = Mcp(self.http, self.gateway.mcp_url)
        await mcp.initialize("2025-03-26")
        body = "[" + ",".join(["0"] * 520_000) + "]"
        assert len(body) < 1024 * 1024
        first = await mcp.post(body)
        call = {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "params": {"name": "get_pipeline", "arguments": {"project_id": P, "pipeline_id": ds.PIPELINE_ID}},
        }
        before = self.hostile.requests
        second = await mcp.post(json.dumps([{**call, "id": i} for i in range(2_000)]))
        gitlab = self.hostile.requests - before
        return (
            f"520,000 items: HTTP {first.status_code} {said(decoded(first))}; 2,000 get_pipeline: "
            f"HTTP {second.status_code}, {gitlab} GitLab requests",
            await self.victim(),
        )

    async def _gzip(self, where: str) -> tuple[str, str]:
        mcp = Mcp(self.http, self.gateway.mcp_url)
        await mcp.initialize()
        self.hostile.bomb, before = where, self.hostile.bombs
        try:
            if where == "tree":
                answer = await mcp.call("get_job", id=P, job_id=JOB, include=["artifacts"])
            else:
                answer = await mcp.call("get_pipeline", project_id=P, pipeline_id=ds.PIPELINE_ID)
        finally:
            self.hostile.bomb = None
        if os.environ.get("BENCH_ATTACKS_DEBUG"):
            print(json.dumps(answer)[:1500])
        return f"{self.hostile.bombs - before} hostile answers; {said(answer)}", await self.victim()

    async def gzip_tree(self) -> tuple[str, str]:
        return await self._gzip("tree")

    async def gzip_graphql(self) -> tuple[str, str]:
        return await self._gzip("graphql")

    async def gzip_string(self) -> tuple[str, str]:
        return await self._gzip("graphql_string")

    async def sessions(self) -> tuple[str, str]:
        statuses: dict[int, int] = {}
        refusal: list[str] = []

        async def pair() -> None:
            mcp = Mcp(self.http, self.gateway.mcp_url)
            response = await self.http.post(mcp.url, json=initialize_request("attacker"), headers=mcp.headers)
            ended = await self.http.delete(
                mcp.url, headers={"Mcp-Session-Id": response.headers.get("mcp-session-id", "")}
            )
            statuses[ended.status_code] = statuses.get(ended.status_code, 0) + 1
            if ended.status_code != 204 and not refusal:
                refusal.append(said(decoded(ended)))

        await gather(6_000, 16, pair)
        counts = ", ".join(f"{n} x HTTP {s}" for s, n in sorted(statuses.items()))
        return f"DELETE: {counts} ({refusal[0] if refusal else 'none refused'})", await self.victim()

    async def _console_session(self) -> dict[str, str]:
        response = await self.http.post(
            f"{self.gateway.url}/broker/login",
            data={"token": CONSOLE_TOKEN, "name": "bench"},
            headers={"Origin": self.gateway.url},
        )
        if response.status_code >= 400:
            raise RuntimeError(f"console sign-in failed: HTTP {response.status_code} {response.text[:200]}")
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in response.cookies.items())}

    async def console(self) -> tuple[str, str]:
        cookie = await self._console_session()
        statuses: dict[int, int] = {}
        opened: list[httpx.Response] = []

        async def stream() -> None:
            request = self.http.build_request("GET", f"{self.gateway.url}/broker/events", headers=cookie)
            response = await self.http.send(request, stream=True)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code == 200:
                opened.append(response)
            else:
                await response.aclose()

        await gather(400, 50, stream)
        await asyncio.sleep(6)  # a refresh or two with every stream open
        mine = self.http.build_request(
            "GET", f"{self.gateway.url}/broker/events", headers=await self._console_session()
        )
        other = await self.http.send(mine, stream=True)
        others = f"another sign-in's stream: HTTP {other.status_code}; " + await self.victim()
        await other.aclose()
        for response in opened:
            await response.aclose()
        return "streams: " + ", ".join(f"{n} x HTTP {s}" for s, n in sorted(statuses.items())), others

    async def nearest(self) -> tuple[str, str]:
        mcp = Mcp(self.http, self.gateway.mcp_url)
        await mcp.initialize()
        self.hostile.crafted_archive = True
        try:
            answer = await mcp.call(
                "get_artifact_file", project_id=P, job_id=JOB, artifact_path="a" * 64 + "/missing.txt"
            )
        finally:
            self.hostile.crafted_archive = False
        error = (answer.get("result", {}).get("structuredContent") or {}).get("error", {})
        nearest = len(error.get("nearest_paths") or error.get("details", {}).get("nearest_paths") or [])
        return f"{said(answer)[:60]}...; {nearest} nearest paths named", await self.victim()

    async def globs(self) -> tuple[str, str]:
        mcp = Mcp(self.http, self.gateway.mcp_url)
        await mcp.initialize()
        outcomes: dict[str, int] = {}
        counter = iter(range(3_000))

        async def one() -> None:
            i = next(counter)
            answer = await mcp.call(
                "get_job", id=P, job_id=JOB, include=["artifacts"], artifact_filter=f"x{i}*"
            )
            key = said(answer)
            outcomes[key] = outcomes.get(key, 0) + 1

        await gather(3_000, 16, one)
        return "; ".join(f"{n} x {k}" for k, n in outcomes.items()), await self.victim()

    async def bidi(self) -> tuple[str, str]:
        mcp = Mcp(self.http, self.gateway.mcp_url)
        await mcp.initialize()
        answer = await mcp.call("get_pipeline", project_id=f"grp/{BIDI}evil", pipeline_id=1)
        await mcp.call("get_job", id=P, job_id=JOB, include=["artifacts"], artifact_filter=f"{BIDI}*")
        await asyncio.sleep(0.5)
        raw = sum(self.gateway.log().count(c) for c in BIDI)
        return f"{said(answer)}; raw bidi characters in the log: {raw}", await self.victim()


async def passthrough(standin_url: str, hostile: HostileGitLab, workdir: Path) -> Outcome:
    """Rotating bogus PRIVATE-TOKENs against a passthrough gateway of its own."""
    gateway = GatewayProcess(
        env={"GITLAB_URL": hostile.url, "GATEWAY_GITLAB__CREDENTIAL_MODE": "passthrough"},
        state_dir=workdir / "passthrough",
    ).start()
    try:
        assert gateway.proc is not None
        async with httpx.AsyncClient(timeout=60, trust_env=False) as http:
            honest = Mcp(http, gateway.mcp_url, {"PRIVATE-TOKEN": ds.ALICE_TOKEN})
            await honest.initialize()
            await honest.call("get_pipeline", project_id=P, pipeline_id=ds.PIPELINE_ID)
            reset_peak(gateway.proc.pid)
            outcomes: dict[str, int] = {}
            before = hostile.refused
            started = time.monotonic()
            with HealthPoller(gateway.url, gateway.proc.pid) as poller:
                for i in range(40):
                    mcp = Mcp(
                        http, gateway.mcp_url, {"PRIVATE-TOKEN": f"glpat-bogus-{i:04d}-{os.urandom(4).hex()}"}
                    )
                    await mcp.initialize()
                    key = said(await mcp.call("get_pipeline", project_id=P, pipeline_id=ds.PIPELINE_ID))
                    outcomes[key] = outcomes.get(key, 0) + 1
                answer = said(await honest.call("get_pipeline", project_id=P, pipeline_id=ds.PIPELINE_ID))
            reached = hostile.refused - before
            attacker = f"{reached} of 40 reached GitLab; " + "; ".join(
                f"{n} x {k}" for k, n in outcomes.items()
            )
            return Outcome(
                "passthrough",
                attacker,
                f"a token GitLab accepted: {'served' if answer == 'success' else answer}",
                vm(gateway.proc.pid, "VmHWM"),
                poller.worst,
                poller.worst_cpu,
                seconds=time.monotonic() - started,
            )
    finally:
        gateway.stop()


async def gather(total: int, concurrency: int, one: Callable[[], Awaitable[None]]) -> None:
    remaining = iter(range(total))

    async def worker() -> None:
        for _ in remaining:
            await one()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


ROWS = [
    "batch",
    "globs",
    "gzip_tree",
    "gzip_graphql",
    "gzip_string",
    "sessions",
    "console",
    "nearest",
    "bidi",
    "passthrough",
]


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU so far: a row whose /healthz was slow while the gateway
    used well under a core was starved by other load, not blocked by the attack."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(only: list[str]) -> list[Outcome]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-attacks-"))
    standin = StandinProcess(workdir / "standin").start()
    hostile = HostileGitLab(standin.url, valid_token=ds.ALICE_TOKEN).start()
    env = {
        "GITLAB_URL": hostile.url,
        "GITLAB_TOKEN": ds.ALICE_TOKEN,
        "GATEWAY_CONSOLE__OPERATOR_TOKEN": CONSOLE_TOKEN,
    }
    gateway = GatewayProcess(env=env, state_dir=workdir / "gateway").start()
    assert gateway.proc is not None
    attacks = Attacks(gateway, hostile, workdir)
    out: list[Outcome] = []
    try:
        await attacks.victim()  # warm: the first call's imports are not the attack's
        for row in [r for r in ROWS if r in only]:
            if row == "passthrough":
                out.append(await passthrough(standin.url, hostile, workdir))
                continue
            reset_peak(gateway.proc.pid)
            started, cpu = time.monotonic(), cpu_seconds(gateway.proc.pid)
            with HealthPoller(gateway.url, gateway.proc.pid) as poller:
                try:
                    attacker, others = await getattr(attacks, row)()
                except Exception as exc:
                    attacker, others = f"bench failed: {type(exc).__name__}: {exc}"[:200], ""
            outcome = Outcome(
                row, attacker, others, vm(gateway.proc.pid, "VmHWM"), poller.worst, poller.worst_cpu
            )
            outcome.seconds = time.monotonic() - started
            outcome.cpu_share = (cpu_seconds(gateway.proc.pid) - cpu) / outcome.seconds
            out.append(outcome)
            print(f"  {row}: {outcome.peak_mib:.0f} MiB, /healthz {outcome.worst_healthz:.2f} s", flush=True)
    finally:
        await attacks.http.aclose()
        gateway.stop()
        hostile.stop()
        standin.stop()
    return out


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| row | peak RSS (MiB) | worst /healthz (s) [gateway CPU in it] | took (s) | gateway CPU "
        "| what the attacker got | others |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.row} | {o.peak_mib:.0f} | {o.worst_healthz:.2f} [{o.worst_cpu:.2f}] | {o.seconds:.1f} "
            f"| {o.cpu_share:.0%} | {o.attacker} | {o.others} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench attacks", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", default=",".join(ROWS), help=f"rows to run, comma-separated ({', '.join(ROWS)})"
    )
    args = parser.parse_args(argv)
    only = [r.strip().replace("-", "_").replace(" ", "_") for r in args.only.split(",")]
    print(f"load average before: {load_average()}", flush=True)
    outcomes = asyncio.run(run(only))
    print(f"load average after: {load_average()}")
    print(table(outcomes))
    bad = [o.row for o in outcomes if o.peak_mib >= 256 or o.worst_healthz >= 1.0]
    print("every row within 256 MiB and 1 s" if not bad else f"past a bound: {', '.join(bad)}")
    return 1 if bad else 0
