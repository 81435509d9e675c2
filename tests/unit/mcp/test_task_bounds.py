"""Tasks bound to the caller that made them and bounded per caller: another client token of the
same agent cannot read, cancel or answer them; a request whose tools are narrowed away from a
task's tool neither reads its result nor takes it over; live tasks per caller are capped; and
``tasks/update`` answers are checked against the question as ``inputResponses`` are."""

from __future__ import annotations

import json

from gateway.broker.tasks import NewTask, id_hash
from gateway.mcp.http.auth import client_token_owner
from gateway.mcp.protocol.task_parts import task_owner
from gateway.testing.conformance import tasks as conformance_tasks
from gateway.tools.caller import Caller
from tests.unit.mcp.conftest import MakeMcp
from tests.unit.mcp.test_tasks import (
    DEV,
    PM,
    accept,
    call,
    get,
    meta,
    rpc,
    store_of,
    until_asked,
    until_terminal,
    update,
)

#: A second token of the dev agent (a rotated one, or another person's).
DEV2 = "dev-other-secret-99887766"
TOKENS = [
    {"token": DEV, "agent_id": "dev"},
    {"token": DEV2, "agent_id": "dev"},
    {"token": PM, "agent_id": "pm"},
]


async def test_another_token_of_the_same_agent_cannot_touch_a_task(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(tools=conformance_tasks.TOOLS, client_tokens=TOKENS)
    created = await call(client, "slow_compute", {"seconds": 60})
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        foreign = await rpc(client, method, {"taskId": created["taskId"], "inputResponses": {}}, token=DEV2)
        assert foreign["error"]["code"] == -32602 and "Task not found" in foreign["error"]["message"]
    assert (await get(client, created["taskId"]))["result"]["status"] == "working"
    await rpc(client, "tasks/cancel", {"taskId": created["taskId"]})


async def test_a_request_narrowed_away_from_the_tasks_tool_cannot_read_or_take_it_over(
    mcp_factory: MakeMcp,
) -> None:
    client = await mcp_factory(tools=conformance_tasks.TOOLS, client_tokens=TOKENS)
    tasks = store_of(client)
    now = tasks.now()
    owner = id_hash(task_owner(Caller(agent_id="dev", credential=None, owner=client_token_owner("dev", DEV))))
    # As a replica killed mid-call leaves it: working, its lease lapsed.
    await tasks.create(
        NewTask(
            id_hash=id_hash("lapsed"),
            owner_hash=owner,
            tool="slow_compute",
            arguments=json.dumps({"seconds": 1}),
            deadline=now + 1,
            expires=now + 3600,
            poll_ms=500,
        ),
        "a-killed-replica",
        -1.0,
    )
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/get",
        "params": {"taskId": "lapsed", "_meta": meta()},
    }
    headers = {
        "Authorization": f"Bearer {DEV}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tasks/get",
        "Mcp-Name": "lapsed",
        "X-MCP-Tools": "confirm_delete",  # this request may call confirm_delete only
    }
    narrowed = await (await client.post(body, headers=headers, session=False)).json()
    assert narrowed["error"]["code"] == -32602
    assert "call of slow_compute, which this request may not call" in narrowed["error"]["message"]
    row = await tasks.get(id_hash("lapsed"))
    assert row is not None and row.lease_owner == "a-killed-replica"  # not taken over
    done = await until_terminal(client, "lapsed")  # its own caller's poll resumes it
    assert done["status"] == "completed"


async def test_live_tasks_per_caller_are_capped(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(
        tools=conformance_tasks.TOOLS, client_tokens=TOKENS, broker={"tasks_per_caller": 2}
    )
    first = await call(client, "slow_compute", {"seconds": 60})
    await call(client, "slow_compute", {"seconds": 60})
    refused = await call(client, "slow_compute", {"seconds": 60})
    assert refused["isError"] is True and "taskId" not in refused
    error = refused["structuredContent"]["error"]
    assert error["reason"] == "rate_limited" and "broker.tasks_per_caller" in error["message"]
    # Another caller is not affected; a task that ends makes room.
    assert (await call(client, "slow_compute", {"seconds": 60}, token=PM))["resultType"] == "task"
    await rpc(client, "tasks/cancel", {"taskId": first["taskId"]})
    assert (await call(client, "slow_compute", {"seconds": 60}))["resultType"] == "task"
    metrics = await (await client.client.get("/metrics")).text()
    assert 'outcome="rate_limited"' in metrics and 'tool="slow_compute"' in metrics


async def test_tasks_update_answers_are_checked_against_the_question(mcp_factory: MakeMcp) -> None:
    client = await mcp_factory(tools=conformance_tasks.TOOLS, client_tokens=TOKENS)
    task_id = (await call(client, "confirm_delete", {"filename": "d.txt"}, asks=True))["taskId"]
    await until_asked(client, task_id)
    for wrong in ("yes", {"action": "accept", "content": {"confirm": "yes"}}, {"action": "maybe"}):
        refused = await update(client, task_id, {"confirm": wrong})
        assert refused["error"]["code"] == -32602, refused
        assert "inputResponses.confirm does not answer the task's question" in refused["error"]["message"]
    still = (await get(client, task_id, asks=True))["result"]
    assert still["status"] == "input_required"
    await update(client, task_id, {"confirm": accept(confirm=True)})
    done = await until_terminal(client, task_id)
    assert done["result"]["content"][0]["text"] == "Deleted d.txt."
