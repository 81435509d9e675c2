"""``gitlab-mcp-gateway broker ...`` against a SQLite state folder: status, history, log,
instruct, stop, reset, human-readable and ``--json``; refusals with one line and status 1."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.__main__ import main, parse_args
from gateway.broker.state_dir import lock_state_dir
from tests.e2e.harness import migrated_sqlite_broker


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("GATEWAY_", "GITLAB_")):
            monkeypatch.delenv(name)
    folder = tmp_path / "state"
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(folder))
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal: confirmations need --yes
    return folder


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["broker", *args])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_command_line_names_the_broker_s_own_log_as_the_broker_does() -> None:
    from gateway.broker import activity_log
    from gateway.cli import arguments

    assert arguments.PIPELINE_LOG == activity_log.PIPELINE_LOG


def test_existing_flags_still_parse() -> None:
    args = parse_args(["--port", "9", "--read-only", "--host", "0.0.0.0"])
    assert (args.port, args.read_only, args.host, args.command) == (9, True, "0.0.0.0", None)
    args = parse_args(["--config", "x.toml", "broker", "log", "dev", "--lines", "5"])
    assert (args.command, args.broker_command, args.agent, args.lines, args.config) == (
        "broker",
        "log",
        "dev",
        5,
        Path("x.toml"),
    )


def test_no_database_is_one_line_and_status_1(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "status")
    assert code == 1 and out == ""
    assert "no broker database in" in err and "GATEWAY_STATE_DIR" in err and "Traceback" not in err


def test_instruct_stop_and_reset(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state.mkdir()
    shutil.copyfile(migrated_sqlite_broker(), state / "broker.db")
    status = as_json(capsys, "status")
    assert status["status"]["state"] == "IDLE" and status["generation"] == 1 and status["archives"] == []
    code, out, _ = run(capsys, "status")
    assert code == 0 and out.startswith("Pipeline 1: IDLE (no plan, auto-advance off)")

    sent = as_json(capsys, "instruct", "Keep v1 <b>and</b> add v2", "--as", "alice")
    assert sent["to"] == "pm"
    history = as_json(capsys, "history")
    assert [(m["from"], m["to"], m["subject"]) for m in history["messages"]] == [("human", "pm", "human")]
    assert history["messages"][0]["body"]["text"] == "Keep v1 <b>and</b> add v2"
    code, out, _ = run(capsys, "history")
    assert code == 0 and "human -> pm [human] high (queued)" in out
    code, out, _ = run(capsys, "log", "pipeline")
    assert "[operator:alice] instruction" in out
    assert "[operator:alice] instruction" in (state / "logs" / "pipeline.log").read_text()

    code, _, err = run(capsys, "reset", "--yes", "--as", "alice")
    assert code == 1 and "conflict" in err and "not STOPPED" in err
    code, _, err = run(capsys, "stop")
    assert code == 1 and "--yes" in err
    code, out, _ = run(capsys, "stop", "--yes", "--as", "alice")
    assert code == 0 and out.strip() == "The pipeline is STOPPED (by operator:alice)."
    assert (state / ".stop-pipeline").exists()
    code, out, _ = run(capsys, "status")
    assert "STOPPED by operator:alice" in out and "broker reset" in out
    code, _, err = run(capsys, "instruct", "more")
    assert code == 1 and "STOPPED" in err

    reset = as_json(capsys, "reset", "--yes", "--as", "bob")
    assert reset["state"] == "IDLE" and reset["generation"] == 2
    assert reset["archived"]["generation"] == 1 and reset["archived"]["messages"] == 1
    assert not (state / ".stop-pipeline").exists()
    assert (state / "logs" / "archive" / "pipeline-1" / "pipeline.log").exists()
    status = as_json(capsys, "status")
    assert status["status"]["state"] == "IDLE" and status["generation"] == 2
    assert [(a["generation"], a["archivedBy"]) for a in status["archives"]] == [(1, "operator:bob")]
    assert as_json(capsys, "history")["messages"] == []
    code, out, _ = run(capsys, "log", "nobody")
    assert code == 1


def test_acting_beside_a_running_gateway_is_refused(
    state: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state.mkdir()
    shutil.copyfile(migrated_sqlite_broker(), state / "broker.db")
    fd = lock_state_dir(state)  # as a running gateway holds it
    try:
        code, _, err = run(capsys, "stop", "--yes")
        # No console configured: the refusal does not send the operator to one.
        assert code == 1 and "a gateway is running" in err and "/broker" not in err
        assert "run this command as the gateway's user" in err
        monkeypatch.setenv("GATEWAY_CONSOLE__OPERATOR_TOKEN", "operator-secret-0123456789")
        code, _, err = run(capsys, "stop", "--yes")
        assert code == 1 and "console (/broker on its port)" in err
        assert as_json(capsys, "status")["status"]["state"] == "IDLE"  # reading works beside it
    finally:
        os.close(fd)


def _iso(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))


def test_status_says_an_answer_was_sent_and_how_long_ago_each_agent_was_seen(
    state: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state.mkdir()
    shutil.copyfile(migrated_sqlite_broker(), state / "broker.db")
    with sqlite3.connect(state / "broker.db") as db:
        db.execute(
            "UPDATE pipeline SET state = 'HUMAN_NEEDED', human_reason = 'which API?', human_by = 'dev', "
            "human_at = ?",
            (_iso(120),),
        )
        # pm's wait was held by a replica killed 40 s ago; dev called 3 s ago.
        db.executemany(
            "INSERT INTO agents (id, last_seen) VALUES (?, ?) "
            "ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen",
            [("pm", _iso(40)), ("dev", _iso(3))],
        )
    code, out, _ = run(capsys, "status")
    # No console to answer in: the command line is the way.
    assert code == 0 and "Answer from the console" not in out
    assert "  Answer with: broker instruct 'what the PM should do'" in out and "broker reset" in out
    monkeypatch.setenv("GATEWAY_CONSOLE__OPERATOR_TOKEN", "operator-secret-0123456789")
    code, out, _ = run(capsys, "status")
    assert code == 0 and "Answer from the console" in out
    monkeypatch.delenv("GATEWAY_CONSOLE__OPERATOR_TOKEN")

    sent = as_json(capsys, "instruct", "Keep v1; add v2 beside it.", "--as", "alice")
    fd = lock_state_dir(state)  # a gateway runs: its agents may be connected
    try:
        code, out, _ = run(capsys, "status")
        status = as_json(capsys, "status")
    finally:
        os.close(fd)
    assert code == 0
    # The person has answered: the status says so, not "Answer from the console" again.
    assert "Answer from the console" not in out
    assert (
        f"  Answered by operator:alice at {status['status']['humanNeeded']['answered']['at']} "
        f"({sent['messageId']}): queued for the PM, which gets it at its next wait_for_message and then "
        "calls resume"
    ) in out
    agents = {
        line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and "last seen" in line
    }
    assert "connected" in agents["pm"] and re.search(r"\((40|41|42)s ago\)", agents["pm"]), agents["pm"]
    assert re.search(r"\([345]s ago\)", agents["dev"]), agents["dev"]
    assert "last seen never" in agents["reviewer"]
    # pm counts as connected by its last call only: no live replica reports its wait.
    assert (
        "  pm: no wait open on a live replica (a replica holding one says so every 15 s); connected only "
        "by the last call, until 60 s after it"
    ) in out
    assert status["status"]["agents"]["pm"]["secondsAgo"] >= 40


async def _ask_for_approvals(state: Path) -> None:
    """Two destructive calls waiting for an operator, as ``confirm_by = "operator"`` records them."""
    from gateway.broker.confirmations import ConfirmationStore
    from gateway.broker.store import Store
    from gateway.config import load_settings

    settings = load_settings(gitlab={"url": "https://gitlab.example.com"}, state_dir=str(state))
    store = await Store.open(settings.broker, state)
    try:
        record = ConfirmationStore(store, time.time)
        for n, why in ((1, "tidy up\x1b[2J"), (2, None)):
            await record.request(
                f"approval:{n}",
                agent="pm (from 127.0.0.1)",
                tool="stop_pipeline",
                what=f"Stop {n}?",
                why=why,
                ttl_seconds=600,
            )
    finally:
        await store.close()


def test_confirmations_are_listed_approved_and_refused(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state.mkdir()
    shutil.copyfile(migrated_sqlite_broker(), state / "broker.db")
    asyncio.run(_ask_for_approvals(state))
    code, out, _ = run(capsys, "confirmations")
    assert code == 0 and "stop_pipeline, asked by pm (from 127.0.0.1)" in out
    assert "why:  tidy up?[2J" in out and "(no reason given)" in out  # no raw escape sequence
    first, second = (a["ticket"] for a in as_json(capsys, "confirmations")["pending"])
    code, out, _ = run(capsys, "approve", first, "--as", "alice")
    assert code == 0 and f"Confirmation {first} approved (by operator:alice)" in out
    refused = as_json(capsys, "refuse", second, "--note", "not today")
    assert refused["status"] == "refused" and refused["note"] == "not today"
    code, _, err = run(capsys, "approve", first)
    assert code == 1 and f"No pending confirmation has ticket {first!r}" in err
    assert as_json(capsys, "confirmations") == {"pending": []}
    code, out, _ = run(capsys, "confirmations")
    assert out.strip() == "No confirmation waits for an operator."


def test_status_counts_the_confirmations_waiting_in_operator_mode(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state.mkdir()
    shutil.copyfile(migrated_sqlite_broker(), state / "broker.db")
    asyncio.run(_ask_for_approvals(state))
    code, out, err = run(capsys, "status")
    assert code == 0 and "wait for an operator" not in out, err  # confirm_by = "client": none asked
    monkeypatch.setenv("GATEWAY_CONFIRM_BY", "operator")
    code, out, err = run(capsys, "status")
    assert code == 0 and "2 confirmations wait for an operator: run broker confirmations" in out, err
    assert as_json(capsys, "status")["confirmationsPending"] == 2
