"""A start loads only what the configuration uses: with the defaults, building the app imports no
console pages (jinja2), no conformance fixtures, no PostgreSQL dialect, no Alembic, no tracing SDK,
no cipher (the first sealed session loads it), neither MCP revision's models (the first request
loads them) and no tool module (the first request that lists or calls a tool loads them); the
command line's help loads none of the gateway's layers."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest

#: Loaded only when configured, or at the first request that needs them.
NOT_AT_START = (
    "jinja2",
    "gateway.console.routes",
    "gateway.testing.conformance.fixtures",
    "sqlalchemy.dialects.postgresql",
    "psycopg",
    "alembic",
    "opentelemetry.sdk",
    "cryptography.hazmat.primitives.ciphers.aead",
    "mcp_types.methods",
    "gateway.tools.ci.get_pipeline",
    "gateway.tools.broker.tools",
    "pathspec",
)

_BUILD_APP = """
import json, sys
from gateway.config import Settings
from gateway.server.app import create_app
import gateway.server.serve
create_app(Settings())
print(json.dumps(sorted(sys.modules)))
"""

_HELP = """
import contextlib, io, json, sys
from gateway.__main__ import main
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main(["--help"])
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(code: str, tmp_path: object) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB_", "GATEWAY_", "OTEL_"))}
    env["GATEWAY_STATE_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.spawns_process(reason="which modules a start imports shows only in a fresh interpreter")
def test_a_start_with_the_defaults_loads_nothing_it_does_not_use(tmp_path: object) -> None:
    loaded = _modules_after(_BUILD_APP, tmp_path)
    assert "aiohttp.web" in loaded  # the probe works: the app was built
    assert sorted(loaded.intersection(NOT_AT_START)) == []


@pytest.mark.spawns_process(reason="which modules --help imports shows only in a fresh interpreter")
def test_help_loads_none_of_the_gateway_s_layers(tmp_path: object) -> None:
    loaded = _modules_after(_HELP, tmp_path)
    assert "gateway.cli.arguments" in loaded
    heavy = {"aiohttp", "pydantic", "sqlalchemy", "mcp_types", "gateway.config", "gateway.broker.store"}
    assert sorted(loaded & heavy) == []


def test_a_command_leaves_the_collector_on(capsys: pytest.CaptureFixture[str]) -> None:
    # main() turns the garbage collector off while the layers load; a command that returns (and a
    # test calling main() in its own process) finds it on again.
    from gateway.__main__ import main

    assert main(["--example-config"]) == 0
    assert "[gitlab]" in capsys.readouterr().out
    assert gc.isenabled()
