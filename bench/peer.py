"""The community GitLab MCP server the benchmarks measure beside the gateway (``--peer``):
``@zereight/mcp-gitlab``, installed with npm into the cache folder on first use.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.load import mcp_session
from bench.rig import Rig, cache_root, start, wait_listening
from tests.e2e.harness import free_port
from tests.standin import dataset as ds

PEER = "@zereight/mcp-gitlab"
PEER_PIPELINE = ("list_pipeline_jobs", {"project_id": ds.PROJECT_PATH, "pipeline_id": str(ds.PIPELINE_ID)})
PEER_FILE = (
    "get_file_contents",
    {"project_id": ds.PROJECT_PATH, "file_path": ds.FILES["app"], "ref": "main"},
)


def install_peer(version: str) -> Path:
    """The peer's entry point, installed with npm into the cache folder on first use."""
    prefix = cache_root() / "bench-peer" / version
    entry = prefix / "node_modules" / "@zereight" / "mcp-gitlab" / "build" / "index.js"
    if not entry.exists():
        print(f"installing {PEER}@{version} into {prefix} (once)", flush=True)
        subprocess.run(
            [
                "npm",
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(prefix),
                f"{PEER}@{version}",
            ],
            check=True,
            timeout=900,
        )
    return entry


async def start_peer(version: str, running: Rig, workdir: Path) -> tuple[str, int, dict[str, str]]:
    """The peer started on the rig's stub (pinned to the server CPU) with an MCP session open: its
    MCP URL, its pid and the headers of its session's requests."""
    entry = install_peer(version)
    peer_port = free_port()
    peer_env = {
        **running.env,
        "STREAMABLE_HTTP": "true",
        "HOST": "127.0.0.1",
        "PORT": str(peer_port),
        "GITLAB_API_URL": f"{running.stub_url}/api/v4",
        "GITLAB_PERSONAL_ACCESS_TOKEN": ds.ALICE_TOKEN,  # the stub's fake token
        "USE_PIPELINE": "true",
        "MAX_REQUESTS_PER_MINUTE": "1000",  # its highest; calls come from 64 addresses
        "LOG_LEVEL": "silent",
        # It refuses to serve HTTP with a server-side token unless callers present a secret.
        "STREAMABLE_HTTP_AUTH_TOKEN": "bench-client-secret",
        "GITLAB_DISABLE_VERSION_CHECK": "true",
    }
    peer = start(["node", str(entry)], peer_env, workdir / "peer.log")
    running.procs.append(peer)
    await wait_listening(peer_port, peer, workdir / "peer.log")
    peer_url = f"http://127.0.0.1:{peer_port}/mcp"
    session = await mcp_session(
        running.clients.sessions[0], peer_url, {"Authorization": "Bearer bench-client-secret"}
    )
    return peer_url, peer.pid, session
