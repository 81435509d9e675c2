"""One answer, one action, everywhere: a confirmation's answer is recorded in the broker's
database (``gateway.broker.confirmations``), so a replayed "yes" does not act again on another
replica or after a restart, a "no" is final for its request state, and a cancel GitLab failed can
be confirmed again with the same answer. And the operator mode: only an operator's approval, in
the console or the command line, lets the call act."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.broker.confirmations import ConfirmationStore
from gateway.broker.database import DatabaseUnavailable
from gateway.broker.errors import BrokerError
from gateway.config import Settings
from gateway.errors import ToolError
from gateway.gitlab.errors import GitLabMaybeSent, GitLabUpstreamError
from gateway.server.app import create_app
from gateway.server.services import SERVICES, build_services
from gateway.tools import broker as broker_tools
from gateway.tools.ci import save_pipeline
from gateway.tools.confirm_records import failed_before_gitlab
from tests.unit.mcp.helpers import Mcp, modern_headers, modern_meta, response_message

TOKEN = "pm-secret-0123456789"
KEY = base64.b64encode(bytes(range(32))).decode()
YES = {"action": "accept", "content": {"confirm": True}}
NO = {"action": "accept", "content": {"confirm": False}}
CANCELLED = {
    "data": {
        "pipelineCancel": {
            "pipeline": {
                "id": "gid://gitlab/Ci::Pipeline/77",
                "status": "CANCELING",
                "ref": "main",
                "path": "/g/p/-/pipelines/77",
                "project": {"fullPath": "g/p", "webUrl": "https://gitlab.example.com/g/p"},
            },
            "errors": [],
        }
    }
}


class GitLab:
    """GitLab's side: every ``pipelineCancel`` it received, answered ``status`` (200: cancelled)."""

    def __init__(self) -> None:
        self.cancels = 0
        self.status = 200

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if b"pipelineCancel" in request.content:
            self.cancels += 1
            if self.status != 200:
                return httpx.Response(self.status, text="unavailable")
            return httpx.Response(200, json=CANCELLED)
        return httpx.Response(404, json={"message": "404 Not Found"})


MakeApp = Callable[..., Awaitable[Mcp]]


@pytest.fixture
def make_app(
    aiohttp_client: Any, make_settings: Callable[..., Settings], at_head: Callable[[Settings], Settings]
) -> MakeApp:
    """``await make_app(gitlab, database_url=None, **settings)``: a gateway (a replica) serving
    save_pipeline and the broker tools to one client token, on the test's state folder (SQLite)
    or ``database_url``; every replica has the same session key, as replicas are configured."""

    async def make(gitlab: GitLab, database_url: str | None = None, **overrides: Any) -> Mcp:
        broker = {"database_url": database_url} if database_url else {}
        settings = at_head(
            make_settings(
                client_tokens=[{"token": TOKEN, "agent_id": "pm"}],
                server={"session_key": KEY},
                broker=broker,
                gitlab={"retry_attempts": 1},
                **overrides,
            )
        )
        gitlab_http = httpx.AsyncClient(transport=httpx.MockTransport(gitlab))
        app = create_app(
            settings,
            services=partial(build_services, gitlab_http=gitlab_http),
            tools=[*save_pipeline.TOOLS, *broker_tools.TOOLS],
        )

        async def close(app: web.Application) -> None:
            await gitlab_http.aclose()

        app.on_cleanup.append(close)
        return Mcp(await aiohttp_client(app), app)

    return make


async def call(
    client: Mcp,
    tool: str,
    arguments: dict[str, Any],
    *,
    capabilities: dict[str, Any] | None = None,
    **params: Any,
) -> dict[str, Any]:
    meta = modern_meta()
    meta["io.modelcontextprotocol/clientCapabilities"] = (
        {"elicitation": {}} if capabilities is None else capabilities
    )
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta, **params},
    }
    headers = {**modern_headers("tools/call", tool), "Authorization": f"Bearer {TOKEN}"}
    resp = await client.post(body, headers=headers, session=False)
    answer = await response_message(resp)  # JSON, or SSE while an operator is waited for
    assert "result" in answer, answer
    return dict(answer["result"])


CANCEL = {"pipeline_id": 77, "action": "cancel"}


async def asked(client: Mcp) -> str:
    """The request state of a cancel's question."""
    first = await call(client, "save_pipeline", CANCEL)
    assert first["resultType"] == "input_required", first
    return str(first["requestState"])


async def answered(client: Mcp, state: str, answer: dict[str, Any]) -> dict[str, Any]:
    return await call(client, "save_pipeline", CANCEL, inputResponses={"confirm": answer}, requestState=state)


def reason(result: dict[str, Any]) -> str | None:
    error = (result.get("structuredContent") or {}).get("error")
    return None if error is None else str(error["reason"])


async def test_a_yes_replayed_after_a_restart_does_not_act_again(make_app: MakeApp) -> None:
    gitlab = GitLab()
    first = await make_app(gitlab, confirm_destructive=True)
    state = await asked(first)
    done = await answered(first, state, YES)
    assert done["structuredContent"]["action"] == "cancel" and gitlab.cancels == 1
    await first.client.close()  # the gateway stops; the same state folder, started again
    again = await make_app(gitlab, confirm_destructive=True)
    replayed = await answered(again, state, YES)
    assert reason(replayed) == "conflict" and "already acted on" in replayed["content"][0]["text"]
    assert gitlab.cancels == 1


async def test_a_yes_replayed_on_another_replica_does_not_act_again(
    make_app: MakeApp, postgres_url_at_head: str
) -> None:
    gitlab = GitLab()
    one = await make_app(gitlab, postgres_url_at_head, confirm_destructive=True)
    two = await make_app(gitlab, postgres_url_at_head, confirm_destructive=True)
    state = await asked(one)
    results = await asyncio.gather(answered(one, state, YES), answered(two, state, YES))
    assert sorted(str(reason(r)) for r in results) == ["None", "conflict"]
    assert gitlab.cancels == 1


async def test_a_no_is_final_for_its_request_state(make_app: MakeApp) -> None:
    gitlab = GitLab()
    client = await make_app(gitlab, confirm_destructive=True)
    state = await asked(client)
    no = await answered(client, state, NO)
    assert reason(no) == "declined" and "did not confirm" in no["content"][0]["text"]
    yes = await answered(client, state, YES)
    assert reason(yes) == "declined" and "already said no" in yes["content"][0]["text"]
    assert gitlab.cancels == 0
    fresh = await asked(client)  # a new question may be answered yes
    assert reason(await answered(client, fresh, YES)) is None and gitlab.cancels == 1


async def test_a_cancel_gitlab_failed_can_be_confirmed_again_with_the_same_answer(make_app: MakeApp) -> None:
    gitlab = GitLab()
    client = await make_app(gitlab, confirm_destructive=True)
    state = await asked(client)
    gitlab.status = 503
    failed = await answered(client, state, YES)
    assert reason(failed) == "upstream_error" and gitlab.cancels >= 1
    gitlab.status = 200
    retried = await answered(client, state, YES)
    assert reason(retried) is None and retried["structuredContent"]["status"] == "canceling"
    assert reason(await answered(client, state, YES)) == "conflict"


async def test_expired_answers_are_pruned_as_new_ones_come(make_app: MakeApp) -> None:
    client = await make_app(GitLab(), confirm_destructive=True)
    broker = client.app[SERVICES].broker
    assert broker is not None
    record = broker.confirmations
    for n in range(5):
        await record.decline(f"answer:old-{n}", ttl_seconds=-1)  # already expired
    await record.decline("answer:new", ttl_seconds=60)
    async with broker.store.read() as q:
        left = (await q.conn.exec_driver_sql("SELECT count(*) FROM confirmations")).scalar_one()
    assert left == 1


async def test_without_its_database_a_confirmed_cancel_does_nothing(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    gitlab = GitLab()
    client = await make_app(gitlab, confirm_destructive=True)
    state = await asked(client)

    async def down(*args: Any, **kw: Any) -> Any:
        raise DatabaseUnavailable("the broker database is unreachable")

    monkeypatch.setattr(ConfirmationStore, "take", down)
    result = await answered(client, state, YES)
    assert reason(result) == "upstream_error" and "did nothing" in result["content"][0]["text"]
    assert gitlab.cancels == 0


@pytest.mark.parametrize(
    ("error", "given_back"),
    [
        (GitLabUpstreamError("GitLab answered 503"), True),
        (BrokerError("conflict", "the pipeline is STOPPED"), True),
        (GitLabMaybeSent("the cancel may have reached GitLab"), False),
        (BrokerError("upstream_error", "the change may or may not have been made"), False),
        (ToolError("upstream_error", "maybe created", outcome="unknown"), False),
        (asyncio.CancelledError(), False),
    ],
)
def test_only_an_action_that_certainly_did_nothing_gives_its_answer_back(
    error: BaseException, given_back: bool
) -> None:
    assert failed_before_gitlab(error) is given_back


# -- the operator answers ------------------------------------------------------------------------------


async def decide(client: Mcp, verb: str, note: str | None = None) -> dict[str, Any]:
    broker = client.app[SERVICES].broker
    assert broker is not None
    for _ in range(200):
        pending = (await broker.operator.pending_confirmations())["pending"]
        if pending:
            return await broker.operator.decide(
                "alice", pending[0]["ticket"], approve=verb == "approve", note=note
            )
        await asyncio.sleep(0.02)
    raise AssertionError("nothing waited for an operator")


async def test_in_operator_mode_the_agent_cannot_answer_its_own_question(make_app: MakeApp) -> None:
    gitlab = GitLab()
    client = await make_app(gitlab, confirm_by="operator", confirm_wait_seconds=0.3)
    # The agent's client answers "yes" itself: no question is put to it, and nothing acts.
    result = await call(client, "save_pipeline", CANCEL, inputResponses={"confirm": YES})
    assert reason(result) == "conflict" and result["structuredContent"]["error"]["pending"] is True
    ticket = result["structuredContent"]["error"]["ticket"]
    assert gitlab.cancels == 0
    broker = client.app[SERVICES].broker
    assert broker is not None
    [pending] = (await broker.operator.pending_confirmations())["pending"]
    assert pending["ticket"] == ticket and pending["tool"] == "save_pipeline"
    assert pending["agent"].startswith("pm") and "cancel GitLab pipeline 77" in pending["what"]


@pytest.mark.parametrize("console", [False, True])
async def test_a_wait_that_runs_out_names_only_the_ways_this_gateway_offers(
    make_app: MakeApp, console: bool
) -> None:
    on = {"console": {"operator_token": "operator-secret-0123456789"}}
    overrides: dict[str, Any] = on if console else {}
    client = await make_app(GitLab(), confirm_by="operator", confirm_wait_seconds=0.1, **overrides)
    result = await call(client, "save_pipeline", CANCEL, capabilities={})
    text = result["content"][0]["text"]
    assert reason(result) == "conflict" and "gitlab-mcp-gateway broker approve" in text
    assert ("console (/broker)" in text) is console


async def test_an_operators_approval_acts_once_and_a_refusal_is_declined(make_app: MakeApp) -> None:
    gitlab = GitLab()
    client = await make_app(gitlab, confirm_by="operator", confirm_wait_seconds=10)
    arguments = {**CANCEL, "reason": "it deploys the wrong tag"}
    waiting = asyncio.create_task(call(client, "save_pipeline", arguments, capabilities={}))
    approval = await decide(client, "approve")
    assert approval["status"] == "approved" and approval["why"] == "it deploys the wrong tag"
    done = await waiting
    assert reason(done) is None and gitlab.cancels == 1
    # The same call again asks anew; refused, it ends declined with the operator's note.
    again = asyncio.create_task(call(client, "save_pipeline", arguments, capabilities={}))
    await decide(client, "refuse", note="leave it running")
    refused = await again
    assert reason(refused) == "declined" and "leave it running" in refused["content"][0]["text"]
    assert gitlab.cancels == 1
    # Refused is final for that call for a while: asked again, it is refused at once, and a new
    # reason does not make it another call (the operator refused the cancel, not its wording).
    assert reason(await call(client, "save_pipeline", arguments, capabilities={})) == "declined"
    reworded = {**arguments, "reason": "really, it deploys the wrong tag"}
    assert reason(await call(client, "save_pipeline", reworded, capabilities={})) == "declined"
    assert gitlab.cancels == 1


async def test_an_operator_decides_through_the_operator_actions(make_app: MakeApp) -> None:
    from gateway.cli.broker_text import confirmations_text

    client = await make_app(GitLab(), confirm_by="operator", confirm_wait_seconds=10)
    waiting = asyncio.create_task(
        call(client, "stop_pipeline", {"reason": "done for today\u202e"}, capabilities={})
    )
    broker = client.app[SERVICES].broker
    assert broker is not None
    for _ in range(200):
        pending = await broker.operator.pending_confirmations()
        if pending["pending"]:
            break
        await asyncio.sleep(0.02)
    text = confirmations_text(pending)
    assert "stop_pipeline, asked by pm" in text and "why:  done for today?" in text  # no raw bidi control
    ticket = pending["pending"][0]["ticket"]
    from gateway.broker.operator import ACTIONS

    await ACTIONS["approve"](broker.operator, "alice", {"ticket": ticket})
    stopped = await waiting
    assert stopped["structuredContent"]["state"] == "STOPPED"
    assert json.loads(json.dumps(await broker.operator.pending_confirmations())) == {"pending": []}
