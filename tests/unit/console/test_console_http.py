"""The console at /broker over HTTP: off unless configured, sign-in, cookie flags, CSRF, Origin,
the viewer's read-only role, escaping of what agents write, the security headers, the actions."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from gateway.config import Settings
from gateway.console.auth import ConsoleAuth
from tests.tampering import tampered
from tests.unit.console.conftest import OPERATOR, VIEWER, Make, broker_of, sign_in


async def test_off_unless_a_token_is_configured(make_console: Make) -> None:
    client = await make_console()
    page = await client.get("/broker")
    assert page.status == 404
    assert "set console.operator_token (or GATEWAY_CONSOLE__OPERATOR_TOKEN)" in await page.text()
    assert (await client.post("/broker/login", data={"token": "x"})).status == 404


async def test_short_or_shared_tokens_are_refused(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ValueError, match="shorter than 16"):
        make_settings(console={"operator_token": "short"})
    with pytest.raises(ValueError, match="are the same"):
        make_settings(console={"operator_token": OPERATOR, "viewer_token": OPERATOR})
    with pytest.raises(ValueError, match="secret of its own"):
        make_settings(
            console={"operator_token": "client-secret-0123456789"},
            client_tokens=[{"token": "client-secret-0123456789", "agent_id": "pm"}],
        )


async def test_sign_in_sets_a_strict_http_only_cookie(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    login = await client.get("/broker")
    assert login.status == 200 and 'name="token"' in await login.text()
    wrong = await client.post("/broker/login", data={"token": "nope" * 5}, allow_redirects=False)
    assert wrong.status == 401
    assert "gateway_console" not in wrong.cookies
    ok = await client.post("/broker/login", data={"token": OPERATOR, "name": "alice"}, allow_redirects=False)
    assert ok.status == 303
    cookie = ok.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/broker" in cookie
    assert "Secure" not in cookie  # plain HTTP here; over TLS the flag is set
    assert OPERATOR not in cookie
    page = await client.get("/broker")
    text = await page.text()
    assert "alice (operator)" in text and "Send to the PM" in text


async def test_behind_a_tls_proxy_the_cookie_is_secure(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    host = f"{client.host}:{client.port}"
    ok = await client.post(
        "/broker/login",
        data={"token": OPERATOR},
        headers={"X-Forwarded-Proto": "https", "Origin": f"https://{host}"},
        allow_redirects=False,
    )
    assert ok.status == 303 and "Secure" in ok.headers["Set-Cookie"]


async def test_human_is_no_agent_id(make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ValueError, match="'human' is not a usable agent id"):
        make_settings(broker={"agents": ["pm", "human"]})


async def test_security_headers_and_no_inline_script(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    await sign_in(client, OPERATOR)
    page = await client.get("/broker")
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["Cache-Control"] == "no-store"
    text = await page.text()
    assert re.search(r"<script(?![^>]*\bsrc=)", text) is None  # every script is a file
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")  # nothing from elsewhere
    js = await client.get("/broker/static/console.js")
    assert js.status == 200 and js.content_type == "text/javascript"
    assert (await client.get("/broker/static/../app.py")).status == 404


@pytest.mark.parametrize("first", [None, "x", "A"])
async def test_actions_need_csrf_and_an_allowed_origin(
    make_console: Make, monkeypatch: pytest.MonkeyPatch, first: str | None
) -> None:
    if first is not None:
        # Pins the token's first character: a tampered token that overwrote it with a fixed
        # character was the right token whenever the real one already began with it.
        real = ConsoleAuth.csrf_token
        monkeypatch.setattr(ConsoleAuth, "csrf_token", lambda self, session: first + real(self, session)[1:])
    client = await make_console(operator_token=OPERATOR)
    csrf = await sign_in(client, OPERATOR)
    assert first is None or csrf.startswith(first)
    form = {"text": "go on", "confirm": "yes"}
    missing = await client.post("/broker/actions/instruct", data=form, allow_redirects=False)
    assert missing.status == 403 and "CSRF" in await missing.text()
    wrong = await client.post("/broker/actions/instruct", data={**form, "csrf": tampered(csrf)})
    assert wrong.status == 403
    foreign = await client.post(
        "/broker/actions/instruct",
        data={**form, "csrf": csrf},
        headers={"Origin": "https://evil.example"},
        allow_redirects=False,
    )
    assert foreign.status == 403
    other_port = await client.post(
        "/broker/actions/instruct",
        data={**form, "csrf": csrf},
        headers={"Origin": "http://127.0.0.1:1"},
        allow_redirects=False,
    )
    assert other_port.status == 403
    unconfirmed = await client.post("/broker/actions/instruct", data={"text": "go on", "csrf": csrf})
    assert unconfirmed.status == 400
    assert await broker_of(client).history.message_history(None, 10) == {
        "messages": [],
        "page_info": {"has_next_page": False, "end_cursor": None},
    }
    own = f"http://{client.host}:{client.port}"
    done = await client.post(
        "/broker/actions/instruct",
        data={**form, "csrf": csrf},
        headers={"Origin": own},
        allow_redirects=False,
    )
    assert done.status == 303 and done.headers["Location"] == "/broker?done=instruct"
    history = (await broker_of(client).history.message_history(None, 10))["messages"]
    assert [(m["from"], m["to"], m["subject"], m["priority"]) for m in history] == [
        ("human", "pm", "human", "high")
    ]
    assert history[0]["body"]["text"] == "go on" and history[0]["body"]["operator"] == "operator:alice"
    log = await broker_of(client).monitoring.activity_log("pipeline", 5)
    assert any("[operator:alice] instruction" in line for line in log["lines"])


async def test_a_viewer_watches_and_cannot_act(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR, viewer_token=VIEWER)
    csrf = await sign_in(client, VIEWER, "bob")
    page = await (await client.get("/broker")).text()
    assert "bob (viewer)" in page and "Send to the PM" not in page and "Stop the pipeline" not in page
    refused = await client.post("/broker/actions/stop", data={"csrf": csrf, "confirm": "yes"})
    assert refused.status == 403
    assert (await broker_of(client).monitoring.status())["state"] == "IDLE"


async def test_a_forged_or_tampered_cookie_is_no_session(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR, viewer_token=VIEWER)
    await sign_in(client, VIEWER, "bob")
    cookie = client.session.cookie_jar.filter_cookies(client.make_url("/broker"))["gateway_console"].value
    payload, sig = cookie.split(".")
    import base64
    import json

    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data["r"] = "operator"
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=") + "." + sig
    client.session.cookie_jar.clear()
    client.session.cookie_jar.update_cookies({"gateway_console": forged}, client.make_url("/broker"))
    page = await client.get("/broker")
    assert 'name="token"' in await page.text()  # the sign-in page, not the console


async def test_message_bodies_and_reasons_are_shown_as_text(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    broker = broker_of(client)
    attack = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    await broker.sending.send_message("dev", "pm", "<b>subject</b>", {"issue": "X-1", "note": attack})
    await broker.control.request_human("dev", attack)
    await broker.monitoring.log_activity("dev", attack)
    await sign_in(client, OPERATOR)
    text = await (await client.get("/broker")).text()
    assert "<script>alert" not in text and "<img src=x" not in text and "<b>subject" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "The pipeline needs a person" in text


async def test_stop_then_start_over_archives_and_starts_idle(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    broker = broker_of(client)
    await broker.sending.send_message("pm", "dev", "develop", {"issue": "X-1"})
    csrf = await sign_in(client, OPERATOR, "carol")
    early = await client.post("/broker/actions/start-over", data={"csrf": csrf, "confirm": "yes"})
    assert early.status == 409 and "not STOPPED" in await early.text()
    stop = await client.post(
        "/broker/actions/stop", data={"csrf": csrf, "confirm": "yes"}, allow_redirects=False
    )
    assert stop.status == 303
    status = await broker.monitoring.status()
    assert status["state"] == "STOPPED" and status["stopped"]["by"] == "operator:carol"
    assert (broker.state_dir / ".stop-pipeline").exists()
    again = await client.post(
        "/broker/actions/start-over", data={"csrf": csrf, "confirm": "yes"}, allow_redirects=False
    )
    assert again.status == 303
    assert (await broker.monitoring.status())["state"] == "IDLE"
    assert not (broker.state_dir / ".stop-pipeline").exists()
    assert (await broker.history.message_history(None, 10))["messages"] == []
    generations = await broker.operator.generations()
    assert generations["generation"] == 2
    assert [(a["generation"], a["finalState"], a["archivedBy"]) for a in generations["archives"]] == [
        (1, "STOPPED", "operator:carol")
    ]
    archived = broker.state_dir / "logs" / "archive" / "pipeline-1" / "pipeline.log"
    assert "STOPPED (stop_pipeline)" in archived.read_text()
    fresh = (await broker.monitoring.activity_log("pipeline", 10))["lines"]
    assert any("STOPPED -> IDLE (start_over)" in line for line in fresh)
    # the new pipeline works: agents send again
    await broker.sending.send_message("pm", "dev", "develop", {"issue": "X-2"})
    page = await (await client.get("/broker")).text()
    assert "Pipeline 2" in page and "Archived pipelines: 1" in page


async def test_the_page_shows_gitlab_s_health_each_agent_s_age_and_an_answer_sent(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR)
    broker = broker_of(client)
    broker.roster.authorize("dev")  # as dev's request_human tool call does
    await broker.control.request_human("dev", "which API?")
    await sign_in(client, OPERATOR, "alice")
    page = await (await client.get("/broker")).text()
    assert "Write the PM an instruction below" in page
    assert 'id="gitlab-health"' not in page  # not checked yet: nothing to show
    # The gateway's check of GitLab (here /readyz's; a running gateway checks every 15 s).
    assert (await client.get("/readyz")).status == 200
    await broker.operator.instruct("alice", "Use v2.")
    page = await (await client.get("/broker")).text()
    health = re.search(r'<p class="gitlab no" id="gitlab-health">([^<]*)</p>', page)
    assert health is not None, page
    assert health.group(1).startswith("GitLab: unreachable (checked ")
    assert "answered HTTP 503" in health.group(1)
    # dev just asked: seen seconds ago.
    assert re.search(r"<td>dev</td>.*?<td>\d{4}-\d\d-\d\dT[\d:]+Z \(\d+s ago\)</td>", page, re.S)
    # The replicas on the database: this gateway's own, alive.
    assert "Replicas: 1 alive, 0 gone" in page
    assert f"<td>{broker.roster.replica} (this page's)</td>" in page
    # The person answered: the banner says the answer is on its way, not to write one.
    assert "Write the PM an instruction below" not in page
    assert re.search(r"Answered by operator:alice at [\dT:Z-]+: queued for the PM, which gets it", page)


async def test_pending_confirmations_are_shown_and_decided_by_an_operator(make_console: Make) -> None:
    client = await make_console(operator_token=OPERATOR, viewer_token=VIEWER)
    record = broker_of(client).confirmations
    for n in (1, 2):
        await record.request(
            f"approval:{n}",
            agent="dev (from 127.0.0.1)",
            tool="save_pipeline",
            what=f"An agent asks to cancel GitLab pipeline {n}: its running jobs stop. Cancel it?",
            why="<script>alert(1)</script>",
            ttl_seconds=600,
        )
    first, second = (a.ticket for a in await record.pending())
    await sign_in(client, VIEWER, "bob")
    watched = await (await client.get("/broker")).text()
    assert "Waiting for your approval (2)" in watched and "Approve" not in watched  # a viewer only sees
    csrf = await sign_in(client, OPERATOR, "carol")
    page = await (await client.get("/broker")).text()
    assert f"confirmation-{first}" in page and "cancel GitLab pipeline 1" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    unticked = await client.post("/broker/actions/approve", data={"csrf": csrf, "ticket": first})
    assert unticked.status == 400
    approved = await client.post(
        "/broker/actions/approve",
        data={"csrf": csrf, "ticket": first, "confirm": "yes"},
        allow_redirects=False,
    )
    assert approved.status == 303
    refused = await client.post(
        "/broker/actions/refuse",
        data={"csrf": csrf, "ticket": second, "confirm": "yes", "note": "keep it"},
        allow_redirects=False,
    )
    assert refused.status == 303
    assert await record.pending() == []
    again = await client.post(
        "/broker/actions/approve", data={"csrf": csrf, "ticket": first, "confirm": "yes"}
    )
    assert again.status == 409 and "No pending confirmation" in await again.text()
    decided = await record.approval("approval:2")
    assert decided is not None and decided.status == "refused" and decided.decided_by == "operator:carol"
