"""The console's test app (``make_console``) and what its tests share."""

from __future__ import annotations

import re
import shutil
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.broker.service import BrokerService
from gateway.config import Settings
from gateway.server.app import create_app
from gateway.server.services import SERVICES, build_services
from tests.e2e.harness import migrated_sqlite_broker

OPERATOR = "operator-token-0123456789"
VIEWER = "viewer-token-0123456789ab"

Make = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
def make_console(aiohttp_client: Any, make_settings: Callable[..., Settings]) -> Make:
    async def make(
        *, state_dir: str | None = None, broker: dict[str, Any] | None = None, **console: Any
    ) -> TestClient[Any, Any]:
        more: dict[str, Any] = {} if state_dir is None else {"state_dir": state_dir}
        settings = make_settings(console=console, broker=broker or {}, **more)
        database = Path(settings.state_dir) / "broker.db"
        if settings.broker.database_url is None and not database.exists():
            # As after a first start: spares each app its migration process.
            database.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(migrated_sqlite_broker(), database)
        gitlab_http = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(503)))
        app = create_app(settings, services=partial(build_services, gitlab_http=gitlab_http))

        async def close(app: web.Application) -> None:
            await gitlab_http.aclose()

        app.on_cleanup.append(close)
        client: TestClient[Any, Any] = await aiohttp_client(app)
        return client

    return make


def broker_of(client: TestClient[Any, Any]) -> BrokerService:
    app = client.app
    assert app is not None
    broker = app[SERVICES].broker
    assert isinstance(broker, BrokerService)
    return broker


async def sign_in(client: TestClient[Any, Any], token: str, name: str = "alice") -> str:
    """Sign in; the page's CSRF token."""
    r = await client.post("/broker/login", data={"token": token, "name": name}, allow_redirects=False)
    assert r.status == 303, await r.text()
    page = await client.get("/broker")
    assert page.status == 200
    found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert found is not None
    return found.group(1)
