"""What people do (gateway.broker.operator), on both backends: instruct the PM, stop, and start
over, with the stopped pipeline archived rather than deleted and a new one IDLE."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gateway.broker.errors import BrokerError
from gateway.broker.schema import archived_activity_log, archived_messages, archived_transitions
from tests.unit.broker.conftest import Env, EnvFactory, close


async def test_instruct_reaches_the_pm_who_resumes(env: Env) -> None:
    await env.ok("dev", "request_human", {"reason": "which API?"})
    sent = await env.broker.operator.instruct("alice", "  Keep v1.  ")
    got = None
    while got is None or got["subject"] != "human":
        got = (await env.wait("pm", 1))["message"]
        assert got is not None
    assert got["messageId"] == sent["messageId"] and got["from"] == "human" and got["priority"] == "high"
    assert got["body"] == {"text": "Keep v1.", "operator": "operator:alice", "state": "HUMAN_NEEDED"}
    assert sent["state"] == "HUMAN_NEEDED"  # what the command line tells the person happens next
    assert (await env.ok("pm", "resume"))["state"] == "IDLE"
    lines = (await env.ok("pm", "get_activity_log", {"agent": "pipeline"}))["lines"]
    assert any("[operator:alice] instruction" in line for line in lines)


async def test_empty_instruction_and_odd_names(env: Env) -> None:
    with pytest.raises(BrokerError, match="empty"):
        await env.broker.operator.instruct("alice", "   ")
    await env.broker.operator.instruct("<script>", "go")  # not a plain name: logged as "operator"
    lines = (await env.ok("pm", "get_activity_log", {"agent": "pipeline"}))["lines"]
    assert any("[operator:operator] instruction" in line for line in lines)


async def test_start_over_archives_and_starts_idle(make_env: EnvFactory) -> None:
    env = await make_env()
    await env.ok("pm", "set_phase_plan", {"planId": "p", "phases": [{"phase": 1, "issues": ["A-1"]}]})
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["A-1"]})
    await env.ok("pm", "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "A-1"}})
    await env.ok("dev", "log_activity", {"message": "on it"})
    refused = await env.call("pm", "start_phase", {"phase": 2, "issues": ["A-2"]})
    assert refused.is_error
    with pytest.raises(BrokerError, match="not STOPPED"):
        await env.broker.operator.start_over("alice")
    await env.broker.operator.stop("alice")
    stopped = await env.err("pm", "start_phase", {"phase": 1, "issues": ["A-1"]})
    assert "broker reset" in stopped["message"] and "Start over" in stopped["message"]
    out = await env.broker.operator.start_over("alice")
    assert out["state"] == "IDLE" and out["generation"] == 2
    assert out["archived"]["generation"] == 1 and out["archived"]["messages"] == 1
    status = await env.status()
    assert status["state"] == "IDLE" and status["phase"] is None and status["issues"] == {}
    assert status["queues"] == {"pm": 0, "dev": 0, "reviewer": 0}
    assert (await env.ok("pm", "get_phase_plan"))["planId"] is None
    assert not (env.state_dir / ".stop-pipeline").exists()
    async with env.broker.store.read() as q:
        archived = {
            t.name: (await q.conn.execute(sa.select(sa.func.count()).select_from(t))).scalar_one()
            for t in (archived_messages, archived_transitions, archived_activity_log)
        }
    assert archived["archived_messages"] == 1 and archived["archived_transitions"] >= 2
    assert archived["archived_activity_log"] >= 3
    dev_log = (await env.ok("pm", "get_activity_log", {"agent": "dev"}))["lines"]
    assert dev_log == []  # the new pipeline's logs start empty
    # the new pipeline runs, and the state survives a restart
    await env.ok("pm", "start_phase", {"phase": 1, "issues": ["B-1"]})
    await close(env)
    env = await make_env(env.settings)
    assert (await env.status())["state"] == "PHASE_PREPARING"
    generations = await env.broker.operator.generations()
    assert generations["generation"] == 2 and generations["archives"][0]["archivedBy"] == "operator:alice"


async def test_an_archived_pipelines_history_stays_readable(env: Env) -> None:
    await env.ok("pm", "send_message", {"to": "dev", "subject": "develop", "body": {"issue": "A-1"}})
    await env.broker.operator.stop("alice")
    await env.broker.operator.start_over("alice")
    history = env.broker.history
    assert (await history.message_history(None, 50))["messages"] == []
    archived = await history.message_history(None, 50, generation=1)
    assert [(m["from"], m["subject"]) for m in archived["messages"]] == [("pm", "develop")]
    assert (await history.message_history("A-1", 50, generation=1))["messages"][0]["body"] == {"issue": "A-1"}
    assert (await history.message_history(None, 50, generation=7))["messages"] == []
    lines = (await env.ok("pm", "get_activity_log", {"agent": "pipeline"}))["lines"]
    assert any("archived with 1 message;" in line for line in lines)
