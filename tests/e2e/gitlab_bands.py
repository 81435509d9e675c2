"""The band matrix: one GitLab stand-in and one gateway per GitLab version and edition.

``gitlab_band`` (module scope, parametrized over :data:`tests.gitlab.versions.BANDS`, ids such as
``17.11-ce``) starts a stand-in answering as that GitLab (its schema, graphql-ruby's validation
errors, ``metadata``, the REST routes it has) and one gateway against it, shared by every test of
the module for that band; pytest orders a module's tests band by band, so each worker starts a
band once. ``band`` (function scope) is the same :class:`Band` after a stand-in reset.

``tests/e2e/conftest.py`` imports both fixtures, so any e2e module can ask for them::

    async def test_x(band: Band) -> None:
        result = await band.call("get_pipeline", {...})
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from mcp.types import CallToolResult

from tests.e2e.harness import GatewayProcess, mcp_client
from tests.gitlab import versions
from tests.gitlab.versions import Edition
from tests.standin.fixtures import Standin, finish_standin, start_standin

BAND_PARAMS = [pytest.param((v, e), id=versions.band_id(v, e)) for v, e in versions.BANDS]
"""``pytest.param((version, edition), id="17.11-ce")`` for every band."""


@dataclass
class Band:
    """One GitLab band under test: its stand-in and the gateway that talks to it.

    Attributes:
        version: ``major.minor`` (``"17.11"``); ``edition``: ``ee`` or ``ce``.
        standin: the stand-in (``control``, ``url``, ``tokens``...) answering as that GitLab.
        gateway: the installed gateway, service mode with alice's token, start-up check on.
    """

    version: str
    edition: Edition
    standin: Standin
    gateway: GatewayProcess

    @property
    def id(self) -> str:
        """``17.11-ce``."""
        return versions.band_id(self.version, self.edition)

    def has(self, coordinate: str) -> bool:
        """Whether this GitLab has the declared schema ``coordinate`` (see :data:`versions.ARRIVALS`)."""
        arrival = next(a for a in versions.ARRIVALS if a.coordinate == coordinate)
        return versions.has(arrival, self.version, self.edition)

    def at_least(self, version: str) -> bool:
        """Whether this GitLab is ``version`` or newer."""
        return versions.parse_version(self.version) >= versions.parse_version(version)

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        """``tools/call`` on this band's gateway (a new MCP session per call)."""
        async with mcp_client(self.gateway.mcp_url) as client:
            return await client.call_tool(tool, arguments)

    async def tool_names(self) -> list[str]:
        """What ``tools/list`` shows on this band."""
        async with mcp_client(self.gateway.mcp_url) as client:
            return sorted(t.name for t in (await client.list_tools()).tools)

    def refused(self) -> list[dict[str, Any]]:
        """The GraphQL requests this band's GitLab refused as invalid since the last reset."""
        return [
            op
            for r in self.standin.control.requests()
            for op in r.get("graphql") or []
            if op.get("valid") is False
        ]


def agent_text(result: CallToolResult) -> str:
    """Everything an agent reads in a result: its text blocks and structured content."""
    texts = [getattr(block, "text", "") for block in result.content]
    return "\n".join([*texts, json.dumps(result.structured_content or {})])


RAW_VALIDATION = re.compile(
    r"doesn't exist on type|doesn't accept argument|isn't a defined input type|"
    r"Cannot query field|Unknown argument|Unknown type"
)
"""graphql-ruby's (and graphql-core's) validation wording: never shown to an agent."""


@pytest.fixture(scope="module", params=BAND_PARAMS)
def gitlab_band(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Band]:
    """A stand-in answering as one GitLab band and one gateway against it, for the whole module."""
    version, edition = request.param
    standin = start_standin(tmp_path_factory, gitlab=(version, edition))
    gateway: GatewayProcess | None = None
    try:
        gateway = GatewayProcess(
            env=standin.env(GATEWAY_GITLAB__STARTUP_CHECK="true"),
            state_dir=tmp_path_factory.mktemp(f"gateway-{version}-{edition}") / "state",
        ).start()
        yield Band(version, edition, standin, gateway)
    finally:
        if gateway is not None:
            gateway.stop()
        # Refusals are what these tests look at: a band's stand-in does not fail the run for them.
        standin.unreported_invalid()
        finish_standin(standin)


@pytest.fixture
def band(gitlab_band: Band) -> Band:
    """``gitlab_band`` with its stand-in reset (seed data, empty request log, no faults), its
    artifacts tree (18.8+) answering ``recursive=true`` with one level, as GitLab's code does."""
    gitlab_band.standin.control.reset()
    gitlab_band.standin.control.settings(artifacts_tree_recursive="children")
    return gitlab_band
