"""Configuration as a user meets it: ``gitlab-mcp-gateway --config ... --print-config``.

Precedence defaults < TOML file < environment < flags; one clean line per bad option, naming it;
the refusal to expose a service token on a non-loopback address; secrets masked when printed;
``gateway/config_example.toml`` (``--example-config``) lists every option with its default.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import certifi
import pytest
from pydantic import BaseModel, ValidationError

from gateway.__main__ import main
from gateway.config import BrokerSettings, Settings, load_settings
from gateway.event_loop import UVLOOP_EXPECTED, new_event_loop

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "gateway" / "config_example.toml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def effective(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run(capsys, *argv, "--print-config")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_precedence_file_then_environment_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(
        tmp_path,
        """
        read_only = false
        [server]
        port = 1111
        session_ttl_seconds = 60
        [gitlab]
        url = "https://file.example.com"
        [cache]
        max_entries = 10
        """.replace("\n        ", "\n"),
    )
    data = effective(capsys, "--config", str(config))
    assert (data["server"]["port"], data["gitlab"]["url"], data["cache"]["max_entries"]) == (
        1111,
        "https://file.example.com",
        10,
    )

    monkeypatch.setenv("GATEWAY_SERVER__PORT", "2222")
    monkeypatch.setenv("GITLAB_URL", "https://env.example.com")
    monkeypatch.setenv("GATEWAY_CACHE__ENABLED", "false")
    data = effective(capsys, "--config", str(config))
    assert data["server"]["port"] == 2222  # environment beats the file
    assert data["gitlab"]["url"] == "https://env.example.com"
    assert data["cache"] == {**data["cache"], "enabled": False, "max_entries": 10}  # merged, not replaced
    assert data["server"]["session_ttl_seconds"] == 60

    data = effective(capsys, "--config", str(config), "--port", "3333", "--read-only")
    assert data["server"]["port"] == 3333  # the flag beats the environment
    assert data["read_only"] is True
    assert data["server"]["session_ttl_seconds"] == 60  # the rest of [server] still from the file


def test_contract_environment_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GITLAB_URL", "https://h.example.com/gitlab")
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-from-environment")
    monkeypatch.setenv("GATEWAY_STATE_DIR", str(tmp_path / "state"))
    settings = load_settings()
    assert settings.gitlab.url == "https://h.example.com/gitlab"
    assert (
        settings.gitlab.token is not None
        and settings.gitlab.token.get_secret_value() == "glpat-from-environment"
    )
    assert settings.state_dir == tmp_path / "state"


@pytest.mark.parametrize(
    ("toml", "env", "expected"),
    [
        ('[server]\nport = "eighty"', {}, "server.port: Input should be a valid integer"),
        (
            "[server]\nport = 70000",
            {},
            "server.port: Input should be less than or equal to 65535 (got 70000)",
        ),
        (
            "[server]\nhots = 1",
            {},
            "server.hots: unknown option (did you mean server.host?); --example-config lists every option",
        ),
        (
            "",
            {"GATEWAY_SERVER__PROT": "9999"},
            "environment variable GATEWAY_SERVER__PROT names no option (did you mean GATEWAY_SERVER__PORT? "
            "--example-config lists every option)",
        ),
        (
            "[gitlab]\ncredentialmode = 'passthrough'",
            {},
            "gitlab.credentialmode: unknown option (did you mean gitlab.credential_mode?); --example-config",
        ),
        (
            "port = 9000",
            {},
            "error: port: unknown top-level option; did you mean server.port (under [server])? "
            "--example-config lists every option (got 9000)",
        ),
        (
            "connect_timeout_seconds = 1",
            {},
            "connect_timeout_seconds: unknown top-level option; did you mean gitlab.connect_timeout_seconds "
            "(under [gitlab]) or broker.connect_timeout_seconds (under [broker])?",
        ),
        ("readonly = true", {}, "readonly: unknown option (did you mean read_only?); --example-config lists"),
        ("[sever]\nport = 1", {}, "sever: unknown option (did you mean server?); --example-config lists"),
        ("[gitlab]\nurl = 'gitlab.example.com'", {}, "gitlab.url: must start with http:// or https://"),
        ("[gitlab]\ncredential_mode = 'pass'", {}, "gitlab.credential_mode: Input should be 'service' or"),
        (
            "",
            {"GATEWAY_SERVER__EVENT_LOOP": "uv"},
            "GATEWAY_SERVER__EVENT_LOOP (server.event_loop): Input should be 'auto', 'uvloop' or 'asyncio' "
            "(got 'uv')",
        ),
        (
            "[gitlab]\nca_bundle = '/nonexistent/ca.pem'",
            {},
            "gitlab.ca_bundle: /nonexistent/ca.pem is not a file",
        ),
        (
            "",
            {"GATEWAY_CACHE__MAX_ENTRIES": "0"},
            "GATEWAY_CACHE__MAX_ENTRIES (cache.max_entries): Input should be greater than or equal to 1",
        ),
        (
            "",
            {"GATEWAY_LOGGING__FORMAT": "xml"},
            "GATEWAY_LOGGING__FORMAT (logging.format): Input should be 'json' or 'plain' (got 'xml')",
        ),
        ("[broker]\nagents = ['pm', '../etc']", {}, "broker.agents: '../etc' is not a usable agent id"),
        (
            "[broker]\nagents = ['dev', 'reviewer']",
            {},
            "broker.agents: ['dev', 'reviewer'] has no 'pm': only 'pm' may call resume (docs/broker.md)",
        ),
        (
            "",
            {"GATEWAY_BROKER__AGENTS": '["pm", "broker"]'},
            "GATEWAY_BROKER__AGENTS (broker.agents): 'broker' is not a usable agent id: it is the sender of "
            "the broker's own notices",
        ),
        (
            "[server]\nmetrics_port = 8080",
            {},
            "configuration error: server.metrics_port 8080 is also server.port: pick another port",
        ),
        (
            "[server]\nhost = '0.0.0.0'\nconformance_fixtures = true",
            {},
            "configuration error: server.conformance_fixtures is a test mode and is refused off loopback",
        ),
        (
            "[[client_tokens]]\ntoken = 'secret-for-qa-0000000'\nagent_id = 'qa'",
            {},
            "client_tokens: agent_id 'qa' is not one of broker.agents ['pm', 'dev', 'reviewer']",
        ),
        ("[server\nport = 1", {}, "gateway.toml: "),  # TOML syntax: the file is named
        (
            "",
            {"GATEWAY_BROKER__AGENTS": "pm,dev"},
            "GATEWAY_BROKER__AGENTS is not valid JSON: options that take a list or a table are written as "
            """JSON in the environment, e.g. GATEWAY_BROKER__AGENTS='["pm", "dev", "reviewer"]'""",
        ),
        (
            "",
            {"GATEWAY_CLIENT_TOKENS": "abc"},
            "GATEWAY_CLIENT_TOKENS is not valid JSON: options that take a list or a table are written as "
            """JSON in the environment, e.g. GATEWAY_CLIENT_TOKENS='[{"token": "<random secret>", """
            """"agent_id": "pm"}]'""",
        ),
        (
            "",
            {"GATEWAY_SERVER__ALLOWED_HOSTS": "gateway.example.com"},
            """GATEWAY_SERVER__ALLOWED_HOSTS is not valid JSON: options that take a list or a table are """
            """written as JSON in the environment, e.g. GATEWAY_SERVER__ALLOWED_HOSTS='["gateway.""",
        ),
        (
            "",
            {"GATEWAY_BROKER": "pm"},
            "GATEWAY_BROKER or a GATEWAY_BROKER__* variable is not valid JSON: options that take a list",
        ),
        (
            "",
            {"GITLAB_URL": "https://user:secret@gitlab.example.com"},
            "GITLAB_URL (gitlab.url): the GitLab URL must not carry credentials; set GITLAB_TOKEN instead",
        ),
    ],
)
def test_bad_options_are_named_in_one_clean_line(
    toml: str,
    env: dict[str, str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = run(capsys, "--config", str(write(tmp_path, toml)))
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gitlab-mcp-gateway: configuration error: ")
    assert expected in lines[0]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://user:secret@gitlab.example.com", "must not carry credentials; set GITLAB_TOKEN instead"),
        ("https://gitlab.example.com:99999", "has no usable port: give a number from 1 to 65535"),
    ],
)
def test_print_config_refuses_a_gitlab_url_the_start_would_refuse(
    url: str, says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITLAB_URL", url)
    code, out, err = run(capsys, "--print-config")
    assert (code, out) == (2, "")
    assert (
        err.startswith("gitlab-mcp-gateway: configuration error: GITLAB_URL (gitlab.url): ") and says in err
    )
    assert "secret" not in err


def test_a_missing_config_file_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(capsys, "--config", str(tmp_path / "nope.toml"))
    assert code == 2
    missing = tmp_path / "nope.toml"
    assert err == f"gitlab-mcp-gateway: configuration error: configuration file {missing} does not exist\n"
    # A relative path is also shown resolved: the gateway may run in another folder than expected.
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "--config", "nope.toml")
    assert code == 2
    assert err == (
        "gitlab-mcp-gateway: configuration error: configuration file nope.toml "
        f"({tmp_path.resolve() / 'nope.toml'}) does not exist\n"
    )


def test_a_bad_secret_is_named_but_never_echoed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_CLIENT_TOKENS", '[{"token": "has a space-0000", "agent_id": "pm"}]')
    code, _, err = run(capsys)
    assert code == 2
    assert "GATEWAY_CLIENT_TOKENS[0].token: must be a non-empty secret without spaces" in err
    assert "has a space" not in err


@pytest.mark.parametrize(
    ("token", "said"),
    [
        (
            "pm-0123456789",
            "is shorter than 16 characters; use a random secret, e.g. the output of `openssl rand",
        ),
        ("REPLACE-WITH-A-RANDOM-SECRET-FOR-PM", "is still the example's placeholder; use a random secret"),
    ],
)
def test_a_guessable_client_token_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], token: str, said: str
) -> None:
    # Whoever presents a client token acts as its agent.
    monkeypatch.setenv("GATEWAY_CLIENT_TOKENS", json.dumps([{"token": token, "agent_id": "pm"}]))
    code, _, err = run(capsys)
    assert code == 2
    assert f"GATEWAY_CLIENT_TOKENS[0].token: {said}" in err
    assert token not in err


@pytest.mark.parametrize(
    ("toml", "env"),
    [
        ("", {"GITLAB_TOKEN": "glpat-REPLACE-ME"}),  # deploy/compose/gateway.env.example's
        ("", {"GITLAB_TOKEN": "glpat-replace-with-your-token"}),
        ("[gitlab]\ntoken = 'REPLACE-ME'", {}),
    ],
)
def test_a_placeholder_gitlab_token_is_refused(
    toml: str,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out, err = run(capsys, "--config", str(write(tmp_path, toml)), "--print-config")
    assert (code, out) == (2, "")
    # The variable that was set and its option, else the file's option.
    named = "GITLAB_TOKEN (gitlab.token)" if env else "gitlab.token"
    assert err == (
        f"gitlab-mcp-gateway: configuration error: {named}: is still the example's placeholder: "
        "create a personal or project access token with scope api (read_api with --read-only; "
        "https://docs.gitlab.com/user/profile/personal_access_tokens/) and set GITLAB_TOKEN to it, or "
        "unset GITLAB_TOKEN to read public projects anonymously\n"
    )
    assert "REPLACE-ME" not in err and "replace-with" not in err


def test_a_real_looking_gitlab_token_is_accepted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Only a placeholder is refused; whether a token works is GitLab's to say (the startup check).
    for token in ("glpat-Re9PlaceMe0123456789", "glpat-REPLAC-0123456789ab", "short"):
        monkeypatch.setenv("GITLAB_TOKEN", token)
        assert effective(capsys)["gitlab"]["token"] == "**********"


def test_a_generated_session_key_is_reported_once_at_info_when_a_session_opens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gateway.mcp.http.sessions import SessionSealer

    def said() -> list[str]:
        return [
            r.levelname
            for r in caplog.records
            if "sealed with a key generated for this process" in r.getMessage()
        ]

    with caplog.at_level("DEBUG", logger="gateway"):
        sealer = SessionSealer(key=None, ttl_seconds=60)
        # A stateless start opens no session: nothing to say yet.
        assert said() == []
        sealer.issue("2025-11-25", {}, "open")
        sealer.issue("2025-11-25", {}, "open")
    assert said() == ["INFO"]
    comment = "\n".join(EXAMPLE.read_text().split("# session_key =")[0].splitlines()[-4:])
    assert "INFO" in comment and "warning" not in comment.lower()


def test_non_loopback_with_a_service_token_and_no_client_tokens_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-service-0000000000")
    code, _, err = run(capsys, "--host", "0.0.0.0", "--print-config")
    assert code == 2
    assert "server.host '0.0.0.0' is not a loopback address, a service GitLab token is set" in err
    assert "Configure client_tokens, use gitlab.credential_mode = 'passthrough', or bind to 127.0.0.1" in err
    assert "glpat-service" not in err

    # Each way out the message offers works.
    assert effective(capsys, "--host", "127.0.0.1")["server"]["host"] == "127.0.0.1"
    monkeypatch.setenv("GATEWAY_CLIENT_TOKENS", '[{"token": "pm-secret-000000000", "agent_id": "pm"}]')
    assert effective(capsys, "--host", "0.0.0.0")["server"]["host"] == "0.0.0.0"
    monkeypatch.delenv("GATEWAY_CLIENT_TOKENS")
    monkeypatch.setenv("GATEWAY_GITLAB__CREDENTIAL_MODE", "passthrough")
    assert effective(capsys, "--host", "0.0.0.0")["gitlab"]["credential_mode"] == "passthrough"


def test_print_config_masks_every_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-service-SECRET-0001")
    monkeypatch.setenv(
        "GATEWAY_CLIENT_TOKENS",
        json.dumps(
            [
                {"token": "pm-client-SECRET-0003", "agent_id": "pm"},
                {"token": "dev-client-SECRET-0004", "agent_id": "dev"},
            ]
        ),
    )
    code, out, err = run(capsys, "--print-config")
    assert code == 0, err
    for secret in ("SECRET-0001", "SECRET-0003", "SECRET-0004"):
        assert secret not in out
    data = json.loads(out)
    assert data["gitlab"]["token"] == "**********"
    unlimited = {
        "toolsets": None,
        "tools": None,
        "read_only": False,
        "confirm_destructive": False,
        "structured_text": None,
        "calls_per_second": None,
        "burst": None,
    }
    assert data["client_tokens"] == [
        {"token": "**********", "agent_id": "pm", **unlimited},
        {"token": "**********", "agent_id": "dev", **unlimited},
    ]


def test_private_ca_bundle_is_accepted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = write(tmp_path, f"[gitlab]\nca_bundle = '{certifi.where()}'")
    assert effective(capsys, "--config", str(config))["gitlab"]["ca_bundle"] == certifi.where()
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    code, _, err = run(capsys, "--config", str(write(tmp_path, f"[gitlab]\nca_bundle = '{not_pem}'")))
    assert code == 2 and f"gitlab.ca_bundle: {not_pem} holds no usable PEM CA certificate" in err


def test_logging_options_ignore_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_LOGGING__FORMAT", "JSON")
    monkeypatch.setenv("GATEWAY_LOGGING__LEVEL", "debug")
    settings = load_settings()
    assert (settings.logging.format, settings.logging.level) == ("json", "DEBUG")


# -- the example file ---------------------------------------------------------------------------


def _option_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and name != "client_tokens":
            out.extend(_option_paths(annotation, (*prefix, name)))
        else:
            out.append((*prefix, name))
    return out


def _documented_options(text: str) -> set[tuple[str, ...]]:
    """Every ``key = ...`` line of the example, commented out or not, under its table."""
    found: set[tuple[str, ...]] = set()
    table: tuple[str, ...] = ()
    for raw in text.splitlines():
        line = raw.lstrip("# ").rstrip()
        if header := re.fullmatch(r"\[\[?([a-z_.]+)\]\]?", line):
            table = tuple(header.group(1).split("."))
            continue
        if option := re.match(r"([a-z_]+) = ", line):
            found.add((*table, option.group(1)))
    return found


def test_the_example_lists_every_option() -> None:
    documented = _documented_options(EXAMPLE.read_text())
    missing = [
        ".".join(p) for p in _option_paths(Settings) if p not in documented and p != ("client_tokens",)
    ]
    assert missing == []
    assert {
        ("client_tokens", name)
        for name in ("token", "agent_id", "toolsets", "tools", "read_only", "calls_per_second", "burst")
    } <= documented
    unknown = [
        ".".join(p) for p in documented if p[0] != "client_tokens" and p not in _option_paths(Settings)
    ]
    assert unknown == []


def test_the_example_holds_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert tomllib.loads(EXAMPLE.read_text())  # valid TOML
    assert effective(capsys, "--config", str(EXAMPLE)) == effective(capsys)


def test_the_examples_toolsets_comment_names_every_toolset_and_keyword() -> None:
    from gateway.config.clients import TOOLSET_KEYWORDS, TOOLSETS

    text = EXAMPLE.read_text()
    comment = text[: text.index("\ntoolsets = ")].rsplit("\n\n", 1)[-1]
    assert all(f'"{name}"' in comment for name in TOOLSETS + TOOLSET_KEYWORDS), comment


def test_every_option_in_the_example_has_a_comment() -> None:
    lines = EXAMPLE.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"#? ?[a-z_]+ = ", line) and not line.startswith('# token = "a-long'):
            above = lines[i - 1]
            assert above.startswith("#") or re.match(r"#? ?[a-z_]+ = ", above), f"no comment above {line!r}"


def _gateway(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m gateway *args`` with a clean environment (plus ``env``) and its own state folder."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GITLAB_", "GATEWAY_"))}
    clean.update(GITLAB_URL="http://127.0.0.1:9", GATEWAY_STATE_DIR=str(tmp_path / "state"), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _at_head(tmp_path: Path, database: Path) -> None:
    """The state folder of :func:`_gateway` with a broker database at the newest schema: the
    gateway opens it without starting its migration process."""
    (tmp_path / "state").mkdir()
    shutil.copyfile(database, tmp_path / "state" / "broker.db")


@pytest.mark.spawns_process(
    reason="runs gitlab-mcp-gateway as a user does: its exit status and what it prints"
)
def test_a_port_in_use_is_one_clean_line_before_the_broker_database_is_made(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = _gateway(tmp_path, "--port", str(port))
    assert result.returncode == 1
    assert not (tmp_path / "state" / "broker.db").exists()  # the port was tried first
    assert result.stderr.splitlines() == [
        f"gitlab-mcp-gateway: cannot listen: error while attempting to bind on address "
        f"('127.0.0.1', {port}): address already in use. Another process listens there: stop it, or "
        "choose another port with server.port (--port N, or GATEWAY_SERVER__PORT=N)"
    ]


@pytest.mark.spawns_process(
    reason="runs gitlab-mcp-gateway as a user does: its exit status and what it prints"
)
def test_a_metrics_port_in_use_is_one_clean_line_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = _gateway(
            tmp_path,
            "--port",
            "0",
            env={"GATEWAY_SERVER__METRICS_PORT": str(port), "GATEWAY_SERVER__METRICS_HOST": "127.0.0.1"},
        )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"gitlab-mcp-gateway: cannot listen: error while attempting to bind on address "
        f"('127.0.0.1', {port}): address already in use. Another process listens there: stop it, or "
        "choose another port with server.metrics_port (GATEWAY_SERVER__METRICS_PORT=N)"
    )
    assert not (tmp_path / "state" / "broker.db").exists()  # refused before the broker opened


@pytest.mark.spawns_process(
    reason="runs gitlab-mcp-gateway as a user does: its exit status and what it prints"
)
def test_a_host_that_is_no_address_is_one_clean_line(tmp_path: Path, broker_at_head_sqlite: Path) -> None:
    _at_head(tmp_path, broker_at_head_sqlite)
    result = _gateway(tmp_path, "--host", "no such host.invalid", "--port", "0")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("gitlab-mcp-gateway: cannot listen: ")
    assert "(server.host 'no such host.invalid'). Give an IP address or a name this machine resolves" in last
    assert "shutting down" not in result.stderr and " stopped" not in result.stderr  # it never served


def test_toolsets_take_a_comma_list_and_refuse_unknown_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_TOOLSETS", "ci, broker")
    assert load_settings().toolsets == ("ci", "broker")
    monkeypatch.setenv("GATEWAY_TOOLSETS", '["repository"]')
    assert load_settings().toolsets == ("repository",)
    monkeypatch.setenv("GATEWAY_TOOLSETS", "cii")
    code, _, err = run(capsys, "--print-config")
    assert code == 2
    assert "GATEWAY_TOOLSETS: " in err and "unknown toolset 'cii': choose from ci, repository" in err


def test_tools_and_toolsets_flags_and_client_token_limits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = effective(capsys, "--toolsets", "ci,broker", "--tools", "get_repository_file")
    assert (data["toolsets"], data["tools"]) == (["ci", "broker"], ["get_repository_file"])
    monkeypatch.setenv(
        "GATEWAY_CLIENT_TOKENS",
        json.dumps(
            [
                {"token": "pm-client-secret-0001", "agent_id": "pm", "toolsets": "broker"},
                {
                    "token": "rv-client-secret-0002",
                    "agent_id": "reviewer",
                    "tools": ["get_pipeline"],
                    "read_only": True,
                },
            ]
        ),
    )
    pm, reviewer = load_settings().client_tokens
    assert (pm.toolsets, pm.tools, pm.read_only) == (("broker",), None, False)
    assert (reviewer.toolsets, reviewer.tools, reviewer.read_only) == (None, ("get_pipeline",), True)


def test_unknown_tool_and_toolset_names_are_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "--tools", "get_pipeline,get_pipelin", "--print-config")
    assert code == 2
    assert "--tools: unknown tool 'get_pipelin' (did you mean 'get_pipeline'?); the tools are get_" in err
    monkeypatch.setenv("GATEWAY_TOOLS", "get_pipline")
    code, _, err = run(capsys, "--print-config")
    assert code == 2
    assert "configuration error: GATEWAY_TOOLS: unknown tool 'get_pipline'" in err
    monkeypatch.delenv("GATEWAY_TOOLS")
    monkeypatch.setenv(
        "GATEWAY_CLIENT_TOKENS",
        json.dumps([{"token": "pm-client-secret-0001", "agent_id": "pm", "tools": ["save_pipelines"]}]),
    )
    code, _, err = run(capsys, "--print-config")
    assert code == 2
    assert "client_tokens[0].tools (agent 'pm'): unknown tool 'save_pipelines'" in err
    monkeypatch.setenv(
        "GATEWAY_CLIENT_TOKENS",
        json.dumps([{"token": "pm-client-secret-0001", "agent_id": "pm", "toolsets": ["brokers"]}]),
    )
    code, _, err = run(capsys, "--print-config")
    assert code == 2
    assert "unknown toolset 'brokers': choose from ci, repository, duo_agent_platform, broker" in err


def test_unknown_gateway_variables_are_named() -> None:
    from gateway.cli.config_errors import unknown_environment

    env = {
        "GATEWAY_STATE_DIR": "/x",
        "GATEWAY_READ_ONLY": "1",
        "GATEWAY_BROKER__FAIL_LIMIT": "4",
        "GATEWAY_FOO__BAR": "1",
        "GATEWAY_BROKER__FAIL_LIMT": "4",
        "GITLAB_URL": "https://x",
    }
    assert unknown_environment(env) == ["GATEWAY_BROKER__FAIL_LIMT", "GATEWAY_FOO__BAR"]


def test_misspelt_gitlab_url_and_token_are_named_but_other_programs_gitlab_variables_are_not() -> None:
    from gateway.cli.config_errors import refused_environment, unknown_environment, unknown_environment_line

    others = {
        "GITLAB_CI": "true",
        "GITLAB_USER_LOGIN": "alice",
        "GITLAB_ENV": "f",
    }
    env = {"GITLAB_URl": "https://x", "GITLAB_TOKNE": "glpat-x", "gitlab_token": "glpat-x", **others}
    assert unknown_environment(env) == ["GITLAB_TOKNE", "GITLAB_URl", "gitlab_token"]
    assert unknown_environment_line("GITLAB_URl") == (
        "environment variable GITLAB_URl names no option and is ignored (did you mean GITLAB_URL? "
        "--example-config lists every option)"
    )
    assert "(did you mean GITLAB_TOKEN? " in unknown_environment_line("GITLAB_TOKNE")
    assert not any(map(refused_environment, unknown_environment(env)))  # warned about, not refused
    # With the right name set, a look-alike is some other program's variable.
    assert unknown_environment({**env, "GITLAB_URL": "https://x", "GITLAB_TOKEN": "glpat-x"}) == []


def test_other_gitlab_mcp_servers_variables_get_a_hint_naming_ours() -> None:
    from gateway.cli.config_errors import refused_environment, unknown_environment, unknown_environment_line

    env = {"GITLAB_API_URL": "https://gitlab.example.com/api/v4", "GITLAB_PERSONAL_ACCESS_TOKEN": "glpat-x"}
    assert unknown_environment(env) == ["GITLAB_API_URL", "GITLAB_PERSONAL_ACCESS_TOKEN"]
    assert unknown_environment_line("GITLAB_PERSONAL_ACCESS_TOKEN") == (
        "environment variable GITLAB_PERSONAL_ACCESS_TOKEN is another GitLab MCP server's name and is "
        "ignored here: this gateway reads GITLAB_TOKEN, gitlab.token in the --config file (--example-config "
        "lists every option)"
    )
    assert "this gateway reads GITLAB_URL" in unknown_environment_line("GITLAB_API_URL")
    assert not any(map(refused_environment, unknown_environment(env)))  # warned about, not refused
    # Beside ours, they are another program's.
    assert unknown_environment({**env, "GITLAB_URL": "https://x", "GITLAB_TOKEN": "glpat-y"}) == []


@pytest.mark.parametrize(
    ("agents", "expected"),
    [
        (["dev", "reviewer"], "has no 'pm': only 'pm' may call resume"),
        (["pm", "broker"], "'broker' is not a usable agent id: it is the sender of the broker's own notices"),
    ],
)
def test_broker_agents_need_pm_and_not_broker(agents: list[str], expected: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(expected)) as caught:
        BrokerSettings(agents=tuple(agents))
    assert "broker.agents" in str(caught.value)


@pytest.mark.spawns_process(
    reason="runs gitlab-mcp-gateway as a user does: its exit status and what it prints"
)
def test_migrate_beside_a_running_gateway_of_this_version_says_there_is_nothing_to_do(
    tmp_path: Path, broker_at_head_sqlite: Path
) -> None:
    """(Beside an older one it refuses: tests/unit/console/test_database_cli.py.)"""
    from gateway.broker.migrations import HEAD
    from gateway.broker.state_dir import lock_state_dir

    _at_head(tmp_path, broker_at_head_sqlite)
    held = lock_state_dir(tmp_path / "state")  # as a gateway serving from that folder holds it
    try:
        result = _gateway(tmp_path, "--migrate")
    finally:
        os.close(held)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"SQLite file {(tmp_path / 'state' / 'broker.db').resolve()}: ")
    assert f"already at {HEAD}, nothing to do (in use by: a gateway runs on the state folder" in result.stdout


@pytest.mark.spawns_process(
    reason="runs gitlab-mcp-gateway as a user does: its exit status and what it prints"
)
def test_a_misspelt_variable_is_named_with_the_option_it_likely_meant(tmp_path: Path) -> None:
    # Without "__" it may be another program's (CGI's GATEWAY_INTERFACE): warned, even by
    # --print-config, which a person checks a setting with.
    out = _gateway(
        tmp_path,
        "--print-config",
        env={"GATEWAY_READONLY": "true", "GATEWAY_GITLAB_TOKEN": "x", "GITLAB_TOKNE": "glpat-x"},
    )
    assert out.returncode == 0
    assert '"read_only": false' in out.stdout
    assert '"token": null' in out.stdout
    assert "GITLAB_TOKNE names no option and is ignored (did you mean GITLAB_TOKEN?" in out.stderr
    assert "GATEWAY_READONLY names no option and is ignored (did you mean GATEWAY_READ_ONLY?" in out.stderr
    assert (
        "GATEWAY_GITLAB_TOKEN names no option and is ignored (did you mean GATEWAY_GITLAB__TOKEN?"
        in out.stderr
    )
    # GATEWAY_<SECTION>__<OPTION> is the gateway's own: refused, as GATEWAY_SERVER__PORTT is.
    out = _gateway(tmp_path, "--print-config", env={"GATEWAY_SERVR__PORT": "1"})
    assert out.returncode == 2 and not out.stdout
    assert (
        "configuration error: environment variable GATEWAY_SERVR__PORT names no option "
        "(did you mean GATEWAY_SERVER__PORT?" in out.stderr
    )


@pytest.mark.skipif(not UVLOOP_EXPECTED, reason="uvloop is installed on POSIX CPython only")
def test_the_event_loop_is_uvloop_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for choice, expected in (("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")):
        monkeypatch.setenv("GATEWAY_SERVER__EVENT_LOOP", choice)
        loop, name = new_event_loop(load_settings().server.event_loop)
        loop.close()
        assert name == expected
        assert type(loop).__module__.startswith(expected)


def test_without_uvloop_auto_runs_on_asyncio_with_one_warning_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as where it is not installed
    monkeypatch.setattr("gateway.event_loop.UVLOOP_EXPECTED", True)  # but should have been
    with caplog.at_level("WARNING", logger="gateway"):
        loop, name = new_event_loop(load_settings().server.event_loop)
    loop.close()
    assert name == "asyncio"
    [warning] = caplog.messages
    assert warning.startswith("uvloop cannot be imported")
    assert 'server.event_loop = "asyncio"' in warning  # how to run on asyncio without the warning
    monkeypatch.setenv("GATEWAY_SERVER__EVENT_LOOP", "uvloop")
    code, _, err = run(capsys, "--print-config")
    assert code == 2
    assert err.startswith(
        "gitlab-mcp-gateway: configuration error: GATEWAY_SERVER__EVENT_LOOP (server.event_loop): uvloop "
    )
    assert 'or set "auto"' in err


def test_example_config_prints_the_packaged_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--example-config")
    assert code == 0
    assert out == EXAMPLE.read_text(encoding="utf-8")
    assert "--example-config > gateway.toml" in out  # it says how it was made
