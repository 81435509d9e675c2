"""The MCP tasks extension (io.modelcontextprotocol/tasks) in the 2026-07-28 era, through the
HTTP endpoint: which calls become tasks, tasks/get, tasks/cancel, tasks/update, who may read a
task, and a task resumed after its replica went away."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.broker.database import DatabaseUnavailable
from gateway.broker.tasks import NewTask, TaskStore, id_hash
from gateway.mcp.http.auth import client_token_owner
from gateway.mcp.protocol.task_parts import task_owner
from gateway.server.services import SERVICES
from gateway.testing.conformance import tasks as conformance_tasks
from gateway.tools.caller import Caller
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.helpers import Mcp, modern_headers, modern_meta

EXTENSION = "io.modelcontextprotocol/tasks"
DEV, PM = "dev-secret-4567890123", "pm-secret-0123456789"
TOKENS = [{"token": DEV, "agent_id": "dev"}, {"token": PM, "agent_id": "pm"}]
#: What the database keeps of the binding of the dev token's tasks.
DEV_OWNER = id_hash(task_owner(Caller(agent_id="dev", credential=None, owner=client_token_owner("dev", DEV))))


def meta(tasks: bool = True, asks: bool = False) -> dict[str, Any]:
    out = modern_meta()
    capabilities: dict[str, Any] = {"extensions": {EXTENSION: {}}} if tasks else {}
    if asks:
        capabilities["elicitation"] = {}
    out["io.modelcontextprotocol/clientCapabilities"] = capabilities
    return out


async def rpc(
    client: Mcp,
    method: str,
    params: dict[str, Any],
    *,
    token: str = DEV,
    tasks: bool = True,
    asks: bool = False,
    name: Any = None,
) -> dict[str, Any]:
    """One 2026-07-28 request; its JSON-RPC response."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta(tasks, asks)}}
    routed = params.get("name", params.get("taskId")) if name is None else name
    headers = {
        "MCP-Protocol-Version": None,
        "Authorization": f"Bearer {token}",
        **modern_headers(method, routed),
    }
    resp = await client.post(body, headers=headers, session=False)  # type: ignore[arg-type]
    return dict(await resp.json())


async def call(client: Mcp, tool: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
    answer = await rpc(client, "tools/call", {"name": tool, "arguments": arguments}, **kw)
    assert "result" in answer, answer
    return dict(answer["result"])


async def get(client: Mcp, task_id: str, **kw: Any) -> dict[str, Any]:
    return await rpc(client, "tasks/get", {"taskId": task_id}, **kw)


async def until_terminal(client: Mcp, task_id: str) -> dict[str, Any]:
    for _ in range(100):
        task = (await get(client, task_id))["result"]
        if task["status"] in ("completed", "failed", "cancelled"):
            return dict(task)
        await asyncio.sleep(0.1)
    raise AssertionError("the task did not end")


def store_of(client: Mcp) -> TaskStore:
    broker = client.app[SERVICES].broker
    assert broker is not None
    return broker.tasks


@pytest.fixture
async def client(mcp_factory: MakeMcp) -> Mcp:
    return await mcp_factory(tools=conformance_tasks.TOOLS, client_tokens=TOKENS)


async def test_a_long_call_becomes_a_task_that_completes_with_its_result(client: Mcp) -> None:
    created = await call(client, "slow_compute", {"seconds": 1, "label": "x"})
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    assert len(created["taskId"]) >= 43  # 256 random bits
    assert created["createdAt"].endswith("Z") and created["ttlMs"] > 3_600_000
    assert created["pollIntervalMs"] == 500
    assert not {"result", "error", "inputRequests"} & set(created)
    working = (await get(client, created["taskId"]))["result"]
    assert working["resultType"] == "complete" and working["status"] == "working"
    done = await until_terminal(client, created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "Computed x after 1 s."}]
    assert done["result"].get("isError", False) is False


async def test_short_calls_and_clients_without_the_extension_get_the_result(client: Mcp) -> None:
    quick = await call(client, "slow_compute", {"seconds": 0})
    assert quick["resultType"] == "complete" and "taskId" not in quick
    plain = await call(client, "slow_compute", {"seconds": 1}, tasks=False)
    assert plain["resultType"] == "complete" and plain["content"][0]["text"].startswith("Computed")
    refused = await call(client, "slow_compute", {"seconds": 7200})  # past its maximum
    assert refused["resultType"] == "complete" and refused["isError"] is True


async def test_a_tool_error_completes_and_an_exception_fails(client: Mcp) -> None:
    tool_error = await call(client, "failing_job", {"seconds": 1})
    crash = await call(client, "protocol_error_job", {"seconds": 1})
    ended = await until_terminal(client, tool_error["taskId"])
    assert ended["status"] == "completed" and ended["result"]["isError"] is True
    failed = await until_terminal(client, crash["taskId"])
    assert failed["status"] == "failed" and "result" not in failed
    assert failed["error"]["code"] == -32603 and "request id" in failed["error"]["message"]


async def test_a_tool_that_needs_tasks_is_refused_to_a_client_without_them(client: Mcp) -> None:
    answer = await rpc(client, "tools/call", {"name": "failing_job", "arguments": {}}, tasks=False)
    assert answer["error"]["code"] == -32021
    assert answer["error"]["data"] == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


async def test_cancel_stops_the_work_and_is_idempotent(client: Mcp) -> None:
    created = await call(client, "slow_compute", {"seconds": 60})
    ack = await rpc(client, "tasks/cancel", {"taskId": created["taskId"]})
    assert ack["result"] == {"resultType": "complete"}
    task = (await get(client, created["taskId"]))["result"]
    assert task["status"] == "cancelled" and task["statusMessage"].startswith("Cancelled")
    again = await rpc(client, "tasks/cancel", {"taskId": created["taskId"]})
    assert again["result"] == {"resultType": "complete"}
    update = await rpc(client, "tasks/update", {"taskId": created["taskId"], "inputResponses": {"k": {}}})
    assert update["result"] == {"resultType": "complete"}


async def test_another_caller_cannot_see_or_cancel_a_task(client: Mcp) -> None:
    created = await call(client, "slow_compute", {"seconds": 60})
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        foreign = await rpc(client, method, {"taskId": created["taskId"], "inputResponses": {}}, token=PM)
        unknown = await rpc(client, method, {"taskId": "no-such-task", "inputResponses": {}})
        assert foreign["error"]["code"] == unknown["error"]["code"] == -32602
        assert foreign["error"]["message"] == unknown["error"]["message"]
    assert (await get(client, created["taskId"]))["result"]["status"] == "working"
    await rpc(client, "tasks/cancel", {"taskId": created["taskId"]})


async def test_the_task_methods_need_the_extension_the_header_and_exist_only_as_defined(client: Mcp) -> None:
    created = await call(client, "slow_compute", {"seconds": 60})
    task_id = created["taskId"]
    undeclared = await get(client, task_id, tasks=False)
    assert undeclared["error"]["code"] == -32021
    mismatched = await get(client, task_id, name="another-task")
    assert mismatched["error"]["code"] == -32020
    for removed in ("tasks/result", "tasks/list"):
        assert (await rpc(client, removed, {"taskId": task_id}))["error"]["code"] == -32601
    await rpc(client, "tasks/cancel", {"taskId": task_id})


async def test_a_task_whose_replica_went_away_is_resumed_with_the_time_left(client: Mcp) -> None:
    tasks = store_of(client)
    owner = DEV_OWNER
    now = tasks.now()
    # The store's clock stands still: the time left is then 0.5 s (a 1 s wait) however long this
    # machine takes between creating the row and taking it over (under load it took over 0.5 s,
    # and the wait resumed with 0 s left).
    tasks._clock = lambda: now
    # As a replica killed mid-wait leaves it: working, its lease lapsed, 0.5 s of its wait left.
    await tasks.create(
        NewTask(
            id_hash=id_hash("orphan"),
            owner_hash=owner,
            tool="slow_compute",
            arguments=json.dumps({"seconds": 30, "label": "resumed"}),
            deadline=now + 0.5,
            expires=now + 3600,
            poll_ms=1000,
        ),
        "a-killed-replica",
        -1.0,
    )
    first = (await get(client, "orphan"))["result"]
    assert first["status"] == "working"
    row = await tasks.get(id_hash("orphan"))
    assert row is not None and row.lease_owner not in (None, "a-killed-replica")
    done = await until_terminal(client, "orphan")
    assert done["result"]["content"][0]["text"] == "Computed resumed after 1 s."


async def test_an_expired_task_is_answered_as_such(client: Mcp) -> None:
    tasks = store_of(client)
    created = await call(client, "slow_compute", {"seconds": 60})
    now = tasks.now()
    tasks._clock = lambda: now + 7200
    answer = await get(client, created["taskId"])
    assert answer["error"]["code"] == -32602 and "expired" in answer["error"]["message"]


async def test_without_its_database_a_call_is_answered_without_a_task(
    client: Mcp, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def down(*args: Any, **kw: Any) -> Any:
        raise DatabaseUnavailable("the broker database is unreachable")

    monkeypatch.setattr(TaskStore, "create", down)
    monkeypatch.setattr(TaskStore, "get", down)
    answered = await call(client, "slow_compute", {"seconds": 1, "label": "sync"})
    assert answered["resultType"] == "complete"
    assert answered["content"][0]["text"] == "Computed sync after 1 s."
    polled = await get(client, "some-task")
    assert polled["error"]["code"] == -32603 and "again in a few seconds" in polled["error"]["message"]


# -- input during a task ------------------------------------------------------------------------


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


async def until_asked(client: Mcp, task_id: str) -> dict[str, Any]:
    for _ in range(100):
        task = (await get(client, task_id, asks=True))["result"]
        if task["status"] != "working":
            return dict(task)
        await asyncio.sleep(0.05)
    raise AssertionError("the task did not ask")


async def update(client: Mcp, task_id: str, responses: Any) -> dict[str, Any]:
    return await rpc(client, "tasks/update", {"taskId": task_id, "inputResponses": responses}, asks=True)


async def test_a_task_that_asks_waits_for_tasks_update_then_completes_with_the_answer(client: Mcp) -> None:
    created = await call(client, "confirm_delete", {"filename": "a.txt"}, asks=True)
    assert created["resultType"] == "task" and "inputRequests" not in created
    task_id = created["taskId"]
    asked = await until_asked(client, task_id)
    assert asked["status"] == "input_required" and asked["resultType"] == "complete"
    assert list(asked["inputRequests"]) == ["confirm"]
    question = asked["inputRequests"]["confirm"]
    assert question["method"] == "elicitation/create" and question["params"]["message"] == "Delete a.txt?"
    # A key that is not outstanding is acknowledged and ignored.
    assert (await update(client, task_id, {"unknown-key": {"ignored": True}}))["result"] == {
        "resultType": "complete"
    }
    assert (await get(client, task_id, asks=True))["result"]["status"] == "input_required"
    assert (await update(client, task_id, {"confirm": accept(confirm=True)}))["result"] == {
        "resultType": "complete"
    }
    done = await until_terminal(client, task_id)
    assert done["status"] == "completed" and "inputRequests" not in done
    assert done["result"]["content"] == [{"type": "text", "text": "Deleted a.txt."}]


async def test_answers_may_come_one_at_a_time_and_only_unanswered_keys_stay_outstanding(client: Mcp) -> None:
    task_id = (await call(client, "multi_input", {}, asks=True))["taskId"]
    asked = await until_asked(client, task_id)
    assert sorted(asked["inputRequests"]) == ["first", "second"]
    await update(client, task_id, {"first": accept(name="one")})
    partial = (await get(client, task_id, asks=True))["result"]
    assert partial["status"] == "input_required" and list(partial["inputRequests"]) == ["second"]
    # The answered key, sent again with another answer, is ignored.
    await update(client, task_id, {"first": accept(name="changed"), "second": accept(name="two")})
    done = await until_terminal(client, task_id)
    assert done["result"]["content"][0]["text"] == "Received one and two."


async def test_a_task_whose_client_cannot_answer_completes_with_a_tool_error(client: Mcp) -> None:
    task_id = (await call(client, "confirm_delete", {"filename": "b.txt"}))["taskId"]
    done = await until_terminal(client, task_id)
    assert done["result"]["isError"] is True and "elicitation" in done["result"]["content"][0]["text"]


async def test_a_cancelled_question_and_a_bad_update_are_answered_as_such(client: Mcp) -> None:
    task_id = (await call(client, "confirm_delete", {"filename": "c.txt"}, asks=True))["taskId"]
    await until_asked(client, task_id)
    bad = await update(client, task_id, ["not", "an", "object"])
    assert bad["error"]["code"] == -32602 and "inputResponses" in bad["error"]["message"]
    await rpc(client, "tasks/cancel", {"taskId": task_id})
    await update(client, task_id, {"confirm": accept(confirm=True)})
    cancelled = (await get(client, task_id))["result"]
    assert cancelled["status"] == "cancelled" and "inputRequests" not in cancelled


async def test_a_task_resumed_elsewhere_keeps_its_answers_and_asks_only_what_is_left(client: Mcp) -> None:
    tasks = store_of(client)
    now = tasks.now()
    # As a replica killed after the first answer leaves it: working, lease lapsed, one answer kept.
    await tasks.create(
        NewTask(
            id_hash=id_hash("half-answered"),
            owner_hash=DEV_OWNER,
            tool="multi_input",
            arguments="{}",
            deadline=now,
            expires=now + 3600,
            poll_ms=500,
            answers=json.dumps({"first": accept(name="kept")}),
        ),
        "a-killed-replica",
        -1.0,
    )
    asked = await until_asked(client, "half-answered")
    assert list(asked["inputRequests"]) == ["second"]
    await update(client, "half-answered", {"second": accept(name="new")})
    done = await until_terminal(client, "half-answered")
    assert done["result"]["content"][0]["text"] == "Received kept and new."


async def test_a_tool_may_ask_before_its_task_and_the_task_gets_the_answer(client: Mcp) -> None:
    first = await call(client, "test_tool_with_task", {}, asks=True)
    assert first["resultType"] == "input_required" and "taskId" not in first
    assert list(first["inputRequests"]) == ["user_name"]
    params = {
        "name": "test_tool_with_task",
        "arguments": {},
        "inputResponses": {"user_name": accept(name="Alice")},
        "requestState": first["requestState"],
    }
    created = (await rpc(client, "tools/call", params, asks=True))["result"]
    assert created["resultType"] == "task"
    assert not {"requestState", "inputRequests"} & set(created)
    done = await until_terminal(client, created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Hello, Alice!"
