"""The console attacked: a signed-out cookie replayed, a token rotated or moved to the other role,
malformed request bodies, and many wrong tokens from one address."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.console.throttle import SignInBudget
from tests.unit.console.conftest import OPERATOR, VIEWER, Make, broker_of, sign_in

COOKIE = "gateway_console"


def cookie_of(client: TestClient[Any, Any]) -> str:
    return client.session.cookie_jar.filter_cookies(client.make_url("/broker"))[COOKIE].value


def replay(client: TestClient[Any, Any], cookie: str) -> None:
    client.session.cookie_jar.clear()
    client.session.cookie_jar.update_cookies({COOKIE: cookie}, client.make_url("/broker"))


async def is_signed_in(client: TestClient[Any, Any]) -> bool:
    page = await client.get("/broker")
    assert page.status == 200
    return 'name="token"' not in await page.text()


async def test_a_cookie_replayed_after_sign_out_is_refused(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    csrf = await sign_in(client, OPERATOR)
    cookie = cookie_of(client)
    out = await client.post("/broker/logout", data={"csrf": csrf}, allow_redirects=False)
    assert out.status == 303
    replay(client, cookie)
    assert not await is_signed_in(client)
    switch = await client.post(
        "/broker/actions/auto-advance",
        data={"csrf": csrf, "confirm": "yes", "enabled": "true"},
        allow_redirects=False,
    )
    assert switch.status == 401
    events = await client.get("/broker/events")
    assert events.status == 401


async def test_signing_out_ends_that_session_only(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    await sign_in(client, OPERATOR, "alice")
    alice = cookie_of(client)
    client.session.cookie_jar.clear()
    csrf = await sign_in(client, OPERATOR, "bob")
    assert (await client.post("/broker/logout", data={"csrf": csrf}, allow_redirects=False)).status == 303
    replay(client, alice)
    assert await is_signed_in(client)


async def test_a_sign_out_on_one_replica_ends_the_cookie_on_the_others(
    postgres_url_at_head: str, make_console: Make, tmp_path: Path
) -> None:
    shared = {"database_url": postgres_url_at_head}
    a = await make_console(operator_token=OPERATOR, broker=shared, state_dir=str(tmp_path / "a"))
    b = await make_console(operator_token=OPERATOR, broker=shared, state_dir=str(tmp_path / "b"))
    csrf = await sign_in(a, OPERATOR)
    cookie = cookie_of(a)
    replay(b, cookie)
    assert await is_signed_in(b)
    assert (await a.post("/broker/logout", data={"csrf": csrf}, allow_redirects=False)).status == 303
    assert not await is_signed_in(b)


async def test_rotating_a_token_or_moving_it_to_the_other_role_ends_its_sessions(
    make_console: Make, tmp_path: Path
) -> None:
    state = str(tmp_path / "state")
    first = await make_console(operator_token=OPERATOR, viewer_token=VIEWER, state_dir=state)
    await sign_in(first, OPERATOR)
    operator_cookie = cookie_of(first)
    first.session.cookie_jar.clear()
    await sign_in(first, VIEWER)
    viewer_cookie = cookie_of(first)
    await first.close()
    rotated = await make_console(
        operator_token="rotated-operator-0123456789", viewer_token=VIEWER, state_dir=state
    )
    replay(rotated, operator_cookie)
    assert not await is_signed_in(rotated)
    replay(rotated, viewer_cookie)
    assert await is_signed_in(rotated)
    await rotated.close()
    # The viewer's token becomes the operator's: the viewer's cookie opens nothing now.
    swapped = await make_console(
        operator_token=VIEWER, viewer_token="new-viewer-token-0123456789", state_dir=state
    )
    for cookie in (operator_cookie, viewer_cookie):
        replay(swapped, cookie)
        assert not await is_signed_in(swapped)


MALFORMED: list[tuple[str, bytes]] = [
    ("application/x-www-form-urlencoded", b"token=\xff\xfe\xfa&name=x"),
    ("application/x-www-form-urlencoded; charset=no-such-charset", b"token=abc"),
    (
        "multipart/form-data; boundary=XYZ",
        b'--XYZ\r\nContent-Disposition: form-data; name="token"\r\n\r\nabc',
    ),
    ("multipart/form-data; boundary=XYZ", b"garbage without any boundary"),
    ("multipart/form-data", b"--XYZ\r\n\r\n--XYZ--\r\n"),
    (
        "multipart/form-data; boundary=XYZ",
        b"--XYZ\r\nContent-Disposition: form-data\r\n\r\nabc\r\n--XYZ--\r\n",
    ),
    (
        "multipart/form-data; boundary=XYZ",
        b'--XYZ\r\nContent-Disposition: form-data; name="token"\r\n'
        b"Content-Type: text/plain; charset=utf-8\r\n\r\n\xff\xfe\r\n--XYZ--\r\n",
    ),
    ("multipart/form-data; boundary=" + "B" * 200, b"--" + b"B" * 200 + b"\r\n"),
]


@pytest.mark.parametrize("path", ["/broker/login", "/broker/logout", "/broker/actions/stop"])
async def test_malformed_bodies_are_a_400_and_one_info_line(
    make_console: Make, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    client = await make_console(operator_token=OPERATOR)
    await sign_in(client, OPERATOR)
    for content_type, body in MALFORMED:
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            r = await client.post(path, data=body, headers={"Content-Type": content_type})
        assert r.status == 400, (content_type, body, r.status, await r.text())
        assert "could not be read" in await r.text()
        assert [rec.levelname for rec in caplog.records if rec.levelno >= logging.WARNING] == [], (
            content_type,
            body,
        )
        assert sum("console request refused" in rec.getMessage() for rec in caplog.records) == 1
    assert (await broker_of(client).monitoring.status())["state"] == "IDLE"


async def test_failed_sign_ins_are_throttled_per_address_and_counted(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR, sign_in_failures=3, sign_in_window_seconds=60)
    statuses = [
        (await client.post("/broker/login", data={"token": f"wrong-token-{i:012}"})).status for i in range(50)
    ]
    assert statuses == [401] * 3 + [429] * 47
    refused = await client.post("/broker/login", data={"token": OPERATOR}, allow_redirects=False)
    assert refused.status == 429  # not even the right token is checked now
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert "try again in" in await refused.text()
    assert "gateway_console" not in refused.cookies
    metrics = await (await client.get("/metrics")).text()
    assert 'gateway_console_sign_ins_failed_total{reason="wrong_token"} 3.0' in metrics
    assert 'gateway_console_sign_ins_failed_total{reason="throttled"} 48.0' in metrics


def test_the_budget_is_per_address_and_ends_with_its_window() -> None:
    now = [1000.0]
    budget = SignInBudget(2, 60.0, clock=lambda: now[0])
    for _ in range(2):
        budget.failed("192.0.2.1")
    assert budget.retry_after("192.0.2.1") == 60
    assert budget.retry_after("::ffff:192.0.2.1") == 60  # the same IPv4 address, mapped
    assert budget.retry_after("192.0.2.2") is None
    now[0] += 59.5
    assert budget.retry_after("192.0.2.1") == 1
    now[0] += 1
    assert budget.retry_after("192.0.2.1") is None
    # An IPv6 host counts by its /64; a right token forgets an address's mistakes.
    budget.failed("2001:db8::1")
    budget.failed("2001:db8::2")
    assert budget.retry_after("2001:db8::ffff") == 60
    assert budget.retry_after("2001:db8:0:1::1") is None
    budget.failed("192.0.2.3")
    budget.succeeded("192.0.2.3")
    budget.failed("192.0.2.3")
    assert budget.retry_after("192.0.2.3") is None


async def test_signing_out_ends_the_open_live_stream(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    csrf = await sign_in(client, OPERATOR)
    stream = await client.get("/broker/events")
    assert stream.status == 200
    seen = b""
    while b"event: sections" not in seen:
        seen += await asyncio.wait_for(stream.content.readany(), 5)
    assert (await client.post("/broker/logout", data={"csrf": csrf}, allow_redirects=False)).status == 303
    while b"event: signed-out" not in seen:
        chunk = await asyncio.wait_for(stream.content.readany(), 3)
        assert chunk, seen[-200:]
        seen += chunk


def test_guesses_from_rotated_addresses_meet_the_consoles_budget_but_not_a_known_address() -> None:
    now = [1000.0]
    budget = SignInBudget(3, 60.0, clock=lambda: now[0], total_failures=5, known_seconds=3600.0)
    budget.succeeded("127.0.0.1")  # the operator signed in from here earlier
    for n in range(5):  # one guess from each of five addresses: no address spends its own budget
        assert budget.retry_after(f"127.0.0.{n + 2}") is None
        budget.failed(f"127.0.0.{n + 2}")
    assert budget.retry_after("127.0.0.200") == 60  # a new address: the console's budget is spent
    assert budget.retry_after("127.0.0.1") is None  # the operator's own address still may try
    now[0] += 61
    assert budget.retry_after("127.0.0.200") is None


async def test_a_sign_in_holds_a_bounded_number_of_live_streams(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR, max_streams_per_session=2)
    await sign_in(client, OPERATOR)
    open_streams = [await client.get("/broker/events") for _ in range(2)]
    assert [s.status for s in open_streams] == [200, 200]
    refused = await client.get("/broker/events")
    assert refused.status == 429 and "console.max_streams_per_session" in await refused.text()
    open_streams[0].close()
    for _ in range(100):  # the server sees the stream end and gives its slot back
        again = await client.get("/broker/events")
        if again.status == 200:
            break
        await asyncio.sleep(0.02)
    assert again.status == 200
    metrics = await (await client.get("/metrics")).text()
    assert "gateway_console_streams_refused_total" in metrics


async def test_streams_share_one_reading_per_change() -> None:
    from gateway.console.live import CSRF_PLACEHOLDER, SharedRendering

    reads: list[tuple[str | None, bool]] = []

    async def render(before: str | None, can_act: bool) -> tuple[dict[str, str], str]:
        reads.append((before, can_act))
        await asyncio.sleep(0.01)
        return {"controls": f'<input name="csrf" value="{CSRF_PLACEHOLDER}">'}, "running"

    shared = SharedRendering(render, period=5.0, clock=lambda: 100.0)
    answers = await asyncio.gather(*(shared.sections(7, None, True, f"token-{n}") for n in range(50)))
    assert len(reads) == 1  # fifty streams, one reading and one rendering
    assert answers[3][0]["controls"] == '<input name="csrf" value="token-3">'  # each its own token
    await shared.sections(8, None, True, "t")  # a change: read again
    await shared.sections(8, None, False, "t")  # a viewer's view is its own
    assert len(reads) == 3
