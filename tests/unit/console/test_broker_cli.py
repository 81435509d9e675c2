"""``gitlab-mcp-gateway broker ...`` against a SQLite state folder: status, history, log,
instruct, stop, reset, human-readable and ``--json``; refusals with one line and status 1."""

from __future__ import annotations

import io
import json
import os
import shutil
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


def test_acting_beside_a_running_gateway_is_refused(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state.mkdir()
    shutil.copyfile(migrated_sqlite_broker(), state / "broker.db")
    fd = lock_state_dir(state)  # as a running gateway holds it
    try:
        code, _, err = run(capsys, "stop", "--yes")
        assert code == 1 and "a gateway is running" in err and "/broker" in err
        assert as_json(capsys, "status")["status"]["state"] == "IDLE"  # reading works beside it
    finally:
        os.close(fd)
