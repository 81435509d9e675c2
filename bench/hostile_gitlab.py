"""A loopback GitLab for ``bench/attacks.py``: every request forwarded to the GitLab stand-in, but
hostile where an attack says so, in a thread of its own (the load generator's loop does not slow
it down):

- :attr:`HostileGitLab.bomb` ``"tree"`` or ``"graphql"``: that route answers ``[{},{},...]``
  gzip-compressed, about 65 KB on the wire and 63 MiB decoded (under the gateway's 64 MiB bound on
  what an answer decodes to, so its other bounds are what stops it); ``"graphql_string"``: GraphQL
  answers an error whose message is 63 MiB of one letter (within every bound: decoded whole);
- :attr:`HostileGitLab.crafted_archive`: the artifacts tree says the archive has no metadata and
  the archive (read with HTTP Range) holds 20,000 crafted paths of 200 characters;
- a ``PRIVATE-TOKEN`` other than ``valid_token`` is answered 401 (:attr:`HostileGitLab.refused`
  counts them), as GitLab answers a bogus token.
"""

from __future__ import annotations

import asyncio
import io
import re
import threading
import zipfile
import zlib

import aiohttp
from aiohttp import web

from tests.e2e.harness import free_port

TREE = re.compile(r"^/api/v4/projects/.+/jobs/\d+/artifacts/tree$")
ARCHIVE = re.compile(r"^/api/v4/projects/.+/jobs/\d+/artifacts$")
GRAPHQL = "/api/graphql"
BOMB_DECODED = 63 * 1024 * 1024
CRAFTED_PATHS = 20_000
HOP_BY_HOP = {"content-length", "transfer-encoding", "content-encoding", "connection", "keep-alive", "host"}


def gzip_bomb(decoded: int = BOMB_DECODED) -> bytes:
    """``[{},{},...,{}]`` of ``decoded`` bytes, gzip-compressed without ever holding it whole."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"{}," * (1 << 20)
    out = [compressor.compress(b"[")]
    left = decoded - 3
    while left > 0:
        piece = chunk[: min(len(chunk), left - left % 3 or 3)]
        out.append(compressor.compress(piece))
        left -= len(piece)
    out.append(compressor.compress(b"{}]"))
    out.append(compressor.flush())
    return b"".join(out)


def gzip_string(decoded: int = BOMB_DECODED) -> bytes:
    """A GraphQL error whose message is one string of ``decoded`` bytes, gzip-compressed: within
    every bound on values, so the gateway decodes it whole (what an answer near the byte bound
    costs once decoded)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"a" * (1 << 20)
    out = [compressor.compress(b'{"data": null, "errors": [{"message": "')]
    for _ in range(decoded // len(chunk)):
        out.append(compressor.compress(chunk))
    out.append(compressor.compress(b'"}]}'))
    out.append(compressor.flush())
    return b"".join(out)


def crafted_archive() -> bytes:
    """A zip of :data:`CRAFTED_PATHS` empty files whose long paths differ only near their ends
    (the worst shape for a similarity search)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for i in range(CRAFTED_PATHS):
            archive.writestr(("a" * 64 + "/") * 2 + f"{'b' * 60}{i:08d}.txt", b"")
    return buffer.getvalue()


def _ranged(request: web.Request, body: bytes) -> web.Response:
    spec = request.headers.get("Range", "")
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", spec)
    if not match:
        return web.Response(body=body, content_type="application/zip")
    first, last = match.groups()
    if not first:
        start, end = max(0, len(body) - int(last)), len(body) - 1
    else:
        start, end = int(first), min(int(last) if last else len(body) - 1, len(body) - 1)
    return web.Response(
        status=206,
        body=body[start : end + 1],
        content_type="application/zip",
        headers={"Content-Range": f"bytes {start}-{end}/{len(body)}"},
    )


class HostileGitLab:
    def __init__(self, upstream: str, *, valid_token: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.valid_token = valid_token
        self.port = free_port()
        self.bomb: str | None = None
        self.crafted_archive = False
        #: Requests forwarded to the stand-in, and requests refused as a bogus token's.
        self.requests = 0
        self.refused = 0
        #: Hostile answers sent.
        self.bombs = 0
        self._bomb = gzip_bomb()
        self._string = gzip_string()
        self._archive = crafted_archive()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HostileGitLab:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the hostile GitLab did not start")
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._open())
        self._ready.set()
        self._loop.run_forever()

    async def _open(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self._client = aiohttp.ClientSession(auto_decompress=False)

    async def _close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        token = request.headers.get("PRIVATE-TOKEN")
        if token is not None and token != self.valid_token:
            self.refused += 1
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        path = request.path
        if (self.bomb == "tree" and TREE.match(path)) or (self.bomb == "graphql" and path == GRAPHQL):
            self.bombs += 1
            return web.Response(
                body=self._bomb, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
            )
        if self.bomb == "graphql_string" and path == GRAPHQL:
            self.bombs += 1
            return web.Response(
                body=self._string, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
            )
        if self.crafted_archive and TREE.match(path):
            return web.json_response({"message": "404 Artifacts metadata Not Found"}, status=404)
        if self.crafted_archive and ARCHIVE.match(path):
            return _ranged(request, self._archive)
        self.requests += 1
        assert self._client is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self._client.request(
            request.method, f"{self.upstream}{request.rel_url}", headers=headers, data=await request.read()
        ) as answer:
            body = await answer.read()
            out = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
            if "Content-Encoding" in answer.headers:
                out["Content-Encoding"] = answer.headers["Content-Encoding"]
            return web.Response(status=answer.status, body=body, headers=out)
