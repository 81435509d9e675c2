"""The band matrix: a GitLab stand-in and a gateway per GitLab version and edition.

``gitlab_band`` (module scope, parametrized over :data:`tests.gitlab.versions.BANDS`, ids such as
``17.11-ce``) is a stand-in answering as that GitLab (its schema, graphql-ruby's validation
errors, ``metadata``, the REST routes it has) and one gateway against it, shared by every test of
the module for that band; pytest orders a module's tests band by band, so each worker sets up a
band once. Every band's stand-in lives in one process per worker (:mod:`tests.standin.bands`,
each band on its own port), and the next band's gateway starts while a band's tests run
(:class:`BandMatrix`). ``band`` (function scope) is the same :class:`Band` after a stand-in reset.
A test whose tool cannot differ between some bands runs on fewer (:func:`on_telling_bands`).

``tests/e2e/conftest.py`` imports both fixtures, so any e2e module can ask for them::

    async def test_x(band: Band) -> None:
        result = await band.call("get_pipeline", {...})
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.types import CallToolResult

from tests.e2e.harness import GatewayProcess, mcp_client, migrated_sqlite_broker
from tests.gitlab import versions
from tests.gitlab.versions import Edition
from tests.standin.control import AsyncStandinControl, StandinControl
from tests.standin.fixtures import Standin, StandinProcess

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


class BandMatrix:
    """One ``tests.standin.bands`` process (every band's stand-in, each on its own port) and the
    bands' gateways, for one test worker.

    A band is set up when its tests first ask for it; setting one up also starts the next band of
    :data:`tests.gitlab.versions.BANDS` in the background (its schema built in the stand-in, its
    gateway starting), so a gateway's start overlaps the previous band's tests. A band's gateway
    stops, and its stand-in is dropped, when pytest is done with the band.
    """

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self.process = StandinProcess(tmp_path_factory.mktemp("band-standin"), module="tests.standin.bands")
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="band")
        self._bands: dict[tuple[str, Edition], Future[Band]] = {}

    def start(self) -> BandMatrix:
        # Made once, here: alembic's migration is not safe in two of the pool's threads at once.
        migrated_sqlite_broker()
        self.process.start()
        return self

    def band(self, version: str, edition: Edition) -> Band:
        """The band's stand-in and a started gateway against it."""
        future = self._submit(version, edition)
        following = versions.BANDS[versions.BANDS.index((version, edition)) + 1 :]
        if following:
            self._submit(*following[0])
        return future.result()

    def _submit(self, version: str, edition: Edition) -> Future[Band]:
        key = (version, edition)
        if key not in self._bands:
            # Made here: pytest's temporary folders are not made from threads.
            state_dir = self._tmp.mktemp(f"gateway-{versions.band_id(version, edition)}") / "state"
            self._bands[key] = self._pool.submit(self._start_band, version, edition, state_dir)
        return self._bands[key]

    def _start_band(self, version: str, edition: Edition, state_dir: Path) -> Band:
        answer = httpx.post(f"{self.process.url}/bands/{versions.band_id(version, edition)}", timeout=60)
        answer.raise_for_status()
        url = answer.json()["url"]
        control = StandinControl(url)
        standin = Standin(
            url=url, root=url, process=self.process, control=control, acontrol=AsyncStandinControl(control)
        )
        gateway = GatewayProcess(env=standin.env(GATEWAY_GITLAB__STARTUP_CHECK="true"), state_dir=state_dir)
        try:
            gateway.start()
        except BaseException:
            control.close()
            raise
        return Band(version, edition, standin, gateway)

    def finish(self, version: str, edition: Edition) -> None:
        """Stop the band's gateway and drop its stand-in (asked for again, it starts anew)."""
        future = self._bands.pop((version, edition), None)
        if future is None or future.exception() is not None:
            return
        band = future.result()
        band.gateway.stop()
        # Refusals are what these tests look at: a band's stand-in does not fail the run for them.
        band.standin.unreported_invalid()
        band.standin.control.close()
        httpx.delete(f"{self.process.url}/bands/{band.id}", timeout=30)

    def close(self) -> None:
        """Finish every band still running (one started ahead and never asked for), stop the process."""
        for key in list(self._bands):
            self.finish(*key)
        self._pool.shutdown()
        self.process.stop()


@pytest.fixture(scope="session")
def band_matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BandMatrix]:
    """The worker's :class:`BandMatrix`."""
    matrix = BandMatrix(tmp_path_factory).start()
    try:
        yield matrix
    finally:
        matrix.close()


@pytest.fixture(scope="module", params=BAND_PARAMS)
def gitlab_band(request: pytest.FixtureRequest, band_matrix: BandMatrix) -> Iterator[Band]:
    """A stand-in answering as one GitLab band and one gateway against it, for the whole module."""
    version, edition = request.param
    band = band_matrix.band(version, edition)
    try:
        yield band
    finally:
        band_matrix.finish(version, edition)


def on_telling_bands(*coordinates: str, routes: tuple[str, ...] = ()) -> pytest.MarkDecorator:
    """Run a test only on the bands that can tell apart the declared ``coordinates`` and REST
    ``routes`` it depends on (:func:`tests.gitlab.versions.telling_bands`; with none: the oldest
    and the newest band)."""
    chosen = versions.telling_bands(coordinates, routes)
    params = [p for p in BAND_PARAMS if p.values[0] in chosen]
    return pytest.mark.parametrize("gitlab_band", params, indirect=True)


@pytest.fixture
def band(gitlab_band: Band) -> Band:
    """``gitlab_band`` with its stand-in reset (seed data, empty request log, no faults), its
    artifacts tree (18.8+) answering ``recursive=true`` with one level, as GitLab's code does."""
    gitlab_band.standin.control.reset()
    gitlab_band.standin.control.settings(artifacts_tree_recursive="children")
    return gitlab_band
