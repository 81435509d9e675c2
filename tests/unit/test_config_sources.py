"""A configuration error names what the user wrote: the environment variable, the file's option or
the flag that gave the bad value, and says in JSON's (or TOML's) words what shape a list or a
table option takes, as ``gitlab-mcp-gateway --print-config`` prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.__main__ import main

ERROR = "gitlab-mcp-gateway: configuration error: "


def refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *,
    env: dict[str, str] | None = None,
    toml: str | None = None,
    flags: tuple[str, ...] = (),
) -> str:
    """The one error line the gateway prints, without its prefix."""
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    argv = [*flags, "--print-config"]
    if toml is not None:
        (tmp_path / "gateway.toml").write_text(toml)
        argv += ["--config", str(tmp_path / "gateway.toml")]
    code = main(argv)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith(ERROR)
    return line.removeprefix(ERROR)


CLIENT_TOKENS_EXAMPLE = """GATEWAY_CLIENT_TOKENS='[{"token": "<random secret>", "agent_id": "pm"}]'"""


@pytest.mark.parametrize(
    ("env", "toml", "expected"),
    [
        (
            {"GATEWAY_CLIENT_TOKENS": '["abcdefghijklmnopqrstuvwxyz"]'},
            None,
            'GATEWAY_CLIENT_TOKENS[0]: each entry must be a JSON object with "token" and "agent_id", '
            f"not a string, e.g. {CLIENT_TOKENS_EXAMPLE}",
        ),
        (
            {"GATEWAY_CLIENT_TOKENS": '{"token": "abcdefghijklmnopqrstuvwxyz", "agent_id": "pm"}'},
            None,
            f"GATEWAY_CLIENT_TOKENS: must be a JSON list, not an object, e.g. {CLIENT_TOKENS_EXAMPLE}",
        ),
        (
            {},
            'client_tokens = ["abcdefghijklmnopqrstuvwxyz"]',
            "client_tokens.0: each entry must be a table with token and agent_id, not a string: write "
            "each under its own [[client_tokens]] header",
        ),
        (
            {},
            '[client_tokens]\ntoken = "abcdefghijklmnopqrstuvwxyz"\nagent_id = "pm"',
            "client_tokens: must be a list of tables, not a table: write each entry under its own "
            "[[client_tokens]] header, with two brackets",
        ),
        (
            {"GATEWAY_BROKER__AGENTS": '"pm"'},
            None,
            """GATEWAY_BROKER__AGENTS (broker.agents): must be a JSON list, not a string, e.g. """
            """GATEWAY_BROKER__AGENTS='["pm", "dev", "reviewer"]'""",
        ),
        (
            {},
            '[broker]\nagents = "pm"',
            'broker.agents: must be a list, not a string, e.g. agents = ["pm", "dev"',
        ),
    ],
)
def test_a_list_or_table_of_the_wrong_shape_shows_the_shape_expected(
    env: dict[str, str],
    toml: str | None,
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    line = refused(capsys, monkeypatch, tmp_path, env=env, toml=toml)
    assert line.startswith(expected), line
    assert "dictionary" not in line and "tuple" not in line and "ClientToken" not in line
    assert "abcdefghijklmnopqrstuvwxyz" not in line  # an entry of client_tokens may be a secret


@pytest.mark.parametrize(
    ("env", "toml", "flags", "expected"),
    [
        (
            {"GATEWAY_SERVER__PORT": "70000"},
            None,
            (),
            "GATEWAY_SERVER__PORT (server.port): Input should be less than or equal to 65535 (got '70000')",
        ),
        # The variable as it was spelt: pydantic-settings ignores the case of GATEWAY_* names.
        (
            {"gateway_server__port": "70000"},
            None,
            (),
            "gateway_server__port (server.port): Input should be less than",
        ),
        (
            {},
            "[server]\nport = 70000",
            (),
            "server.port: Input should be less than or equal to 65535 (got 70000)",
        ),
        # The environment outranks the file: the variable is where the value came from.
        (
            {"GATEWAY_SERVER__PORT": "70000"},
            "[server]\nport = 8000",
            (),
            "GATEWAY_SERVER__PORT (server.port): Input",
        ),
        # A flag outranks both.
        (
            {"GATEWAY_SERVER__PORT": "8000"},
            "[server]\nport = 8001",
            ("--port", "70000"),
            "--port (server.port): Input",
        ),
        (
            {"GITLAB_URL": "gitlab.example.com"},
            None,
            (),
            "GITLAB_URL (gitlab.url): must start with http:// or https://",
        ),
        (
            {"GATEWAY_GITLAB__URL": "gitlab.example.com"},
            None,
            (),
            "GATEWAY_GITLAB__URL (gitlab.url): must start with",
        ),
        ({}, "[gitlab]\nurl = 'gitlab.example.com'", (), "gitlab.url: must start with http:// or https://"),
        ({"GATEWAY_READ_ONLY": "maybe"}, None, (), "GATEWAY_READ_ONLY: Input should be a valid boolean"),
        (
            {"GATEWAY_CLIENT_TOKENS": '[{"token": "short-secret", "agent_id": "pm"}]'},
            None,
            (),
            "GATEWAY_CLIENT_TOKENS[0].token: is shorter than 16 characters",
        ),
        (
            {"GATEWAY_SERVER__PROT": "9000"},
            None,
            (),
            "environment variable GATEWAY_SERVER__PROT names no option (did you mean GATEWAY_SERVER__PORT?",
        ),
    ],
)
def test_a_bad_value_is_named_where_it_was_given(
    env: dict[str, str],
    toml: str | None,
    flags: tuple[str, ...],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    line = refused(capsys, monkeypatch, tmp_path, env=env, toml=toml, flags=flags)
    assert line.startswith(expected), line


def test_a_gitlab_url_refused_at_start_names_its_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    line = refused(capsys, monkeypatch, tmp_path, env={"GITLAB_URL": "https://gitlab.example.com:99999"})
    assert line.startswith(
        "GITLAB_URL (gitlab.url): GitLab URL 'https://gitlab.example.com:99999' has no usable port"
    )
    monkeypatch.delenv("GITLAB_URL")
    line = refused(capsys, monkeypatch, tmp_path, toml="[gitlab]\nurl = 'https://gitlab.example.com:99999'")
    assert line.startswith("gitlab.url: GitLab URL")


@pytest.mark.parametrize(
    "name", ["GATEWAY_SERVER__METRICS_PORT", "GATEWAY_SERVER__PORT", "GATEWAY_CACHE__ENABLED"]
)
def test_an_empty_variable_is_called_empty(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A shell or compose file expanding an unset ${VAR} leaves the variable set but empty.
    line = refused(capsys, monkeypatch, tmp_path, env={name: ""})
    option = name.removeprefix("GATEWAY_").lower().replace("__", ".")
    assert line == f"{name} ({option}): is set but empty: give it a value, or unset it to keep the default"
