"""A short soak (the benchmark ``bench/soak.py`` at small scale): sessions calling a mix of
``get_pipeline``, ``get_repository_file``, ``save_pipeline`` and broker send/wait at once. Every call
gets an answer without error, no broker message is lost, and the gateway is still healthy.
Figures (calls/s, latency, RSS) are the benchmark's job, not this test's."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from bench.soak import soak
from tests.e2e.harness import GatewayProcess
from tests.standin.fixtures import Standin

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


async def test_a_short_soak_loses_nothing_and_fails_nothing(
    fresh_standin: Standin, start_gateway: Callable[..., GatewayProcess]
) -> None:
    gateway = start_gateway(env=fresh_standin.env())
    assert gateway.proc is not None
    figures = await soak(gateway.mcp_url, gateway.proc.pid, sessions=12, seconds=4, settle=0)
    assert figures["calls"] > 50, figures
    assert figures["errors"] == {}, figures["errors"]
    assert figures["messages"]["sent"] > 0
    assert figures["messages"]["lost"] == 0, figures["messages"]
    assert httpx.get(f"{gateway.url}/healthz", timeout=5).status_code == 200
    assert "Traceback" not in gateway.log()
